/*
 * The lake's local filesystem: Hadoop's checksummed LocalFileSystem without a process per file.
 *
 * Without Hadoop's native library (pyspark ships none), RawLocalFileSystem.setPermission forks
 * `chmod` for every file and directory it creates, .crc sidecars included: about 5 ms each, a
 * few dozen per flush or state commit. This subclass sets the same POSIX permissions through
 * java.nio instead, and names its scheme ("file"), which Iceberg asks for before planning a
 * scan. Everything else (checksums, renames, listing) is Hadoop's own code.
 *
 * `lakesync setup` compiles this file into the jar folder when a JDK is present; the session
 * factory then points the `lakesync` catalog's `fs.file.impl` at it (only that catalog: other
 * `file:` I/O in the session keeps Hadoop's default).
 */
package io.lakesync.platform.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsAction;
import org.apache.hadoop.fs.permission.FsPermission;

public class NoForkLocalFileSystem extends LocalFileSystem {
  public NoForkLocalFileSystem() {
    super(new Raw());
  }

  /** RawLocalFileSystem with an in-process setPermission. */
  public static class Raw extends RawLocalFileSystem {
    @Override
    public String getScheme() {
      return "file";
    }

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      if (permission.getStickyBit()) {
        super.setPermission(p, permission); // java.nio cannot set it; Hadoop's way then
        return;
      }
      Set<PosixFilePermission> perms = EnumSet.noneOf(PosixFilePermission.class);
      add(perms, permission.getUserAction(), PosixFilePermission.OWNER_READ,
          PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE);
      add(perms, permission.getGroupAction(), PosixFilePermission.GROUP_READ,
          PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE);
      add(perms, permission.getOtherAction(), PosixFilePermission.OTHERS_READ,
          PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE);
      Files.setPosixFilePermissions(pathToFile(p).toPath(), perms);
    }

    private static void add(Set<PosixFilePermission> perms, FsAction action,
        PosixFilePermission read, PosixFilePermission write, PosixFilePermission execute) {
      if (action.implies(FsAction.READ)) {
        perms.add(read);
      }
      if (action.implies(FsAction.WRITE)) {
        perms.add(write);
      }
      if (action.implies(FsAction.EXECUTE)) {
        perms.add(execute);
      }
    }
  }
}
