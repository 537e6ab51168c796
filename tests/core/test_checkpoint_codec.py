"""The checkpoint's wire pieces: stamped blocks and the manifest, and their bad inputs."""

from __future__ import annotations

import pytest

from lakesync_platform.core._pb import lakesync_platform_v1_pb2 as pb
from lakesync_platform.core.checkpoint import (
    REFERENCE_FORMAT,
    STAMPED_FORMAT,
    ChunkInfo,
    Manifest,
    archived_manifest,
    checkpoint_tag,
    chunk_cursor,
    chunk_name,
    decode_manifest,
    encode_manifest,
    manifest_cursor,
)
from lakesync_platform.core.errors import ValidationError
from lakesync_platform.core.proto import CodecError, decode_sync_response
from lakesync_platform.core.stamped import (
    StampedBlock,
    StampedColumns,
    decode_stamped_response,
    encode_stamped_response,
)

BLOCK = StampedBlock(
    "todos",
    ["a", "b", "c"],
    [30, 31, 32],
    ["w1", "w2", "w1"],
    [0, 5, 0],
    ["", "w9", ""],
    [7, 8, 9],
    [
        StampedColumns("title", ["x", None, "z"], [30, 0, 32], ["w1", "", "w1"]),
        StampedColumns("meta", [{"k": [1, 2.5]}, "s", None], [29, 31, 0], ["w1", "w2", ""]),
    ],
)


def test_blocks_round_trip_and_subset() -> None:
    data = encode_stamped_response([BLOCK, BLOCK.subset([2, 0])], 99)
    blocks, server_hlc = decode_stamped_response(data)
    assert server_hlc == 99 and blocks == [BLOCK, BLOCK.subset([2, 0])]
    assert blocks[1].row_ids == ["c", "a"] and blocks[1].columns[1].values == [
        None,
        {"k": [1, 2.5]},
    ]
    # fields 2 and 3 are lakesync.v1.SyncResponse's: a reader of that sees no rows, not garbage
    assert decode_sync_response(data) == ([], 99, False)


@pytest.mark.parametrize(
    "data",
    [
        b"\x22\x05abc",  # a block cut short
        pb.StampedSyncResponse(
            blocks=[pb.StampedBlock(table="t", row_ids=["a"], hlcs=[1, 2])]
        ).SerializeToString(),  # lists of different lengths
        pb.StampedSyncResponse(
            blocks=[
                pb.StampedBlock(
                    table="t",
                    row_ids=["a"],
                    hlcs=[1],
                    client_ids=["w"],
                    delete_hlcs=[0],
                    delete_client_ids=[""],
                    positions=[1],
                    columns=[
                        pb.StampedColumnBlock(name="c", values=b"[1", hlcs=[1], client_ids=["w"])
                    ],
                )
            ]
        ).SerializeToString(),  # values that are not JSON
    ],
)
def test_a_malformed_frame_is_a_codec_error(data: bytes) -> None:
    with pytest.raises(CodecError):
        decode_stamped_response(data)


def test_manifest_round_trip_names_and_bad_manifests() -> None:
    chunk = ChunkInfo(chunk_name(42, 0), "todos", 3, 100)
    m = Manifest("42", "2026-01-01T00:00:00.000+00:00", 1, 3, [chunk.name], STAMPED_FORMAT, [chunk])
    assert decode_manifest(encode_manifest(m)) == m and m.cursor == 42
    reference = (
        b'{"snapshotHlc":"7","generatedAt":"x","chunkCount":1,"totalDeltas":2,'
        b'"chunks":["chunk-000.bin"]}'
    )
    assert decode_manifest(reference).format == REFERENCE_FORMAT  # read, never served
    assert b'"snapshotHlc":"42"' in encode_manifest(m) and b'"totalDeltas":3' in encode_manifest(m)
    assert chunk_name(42, 7) == "chunk-42-007.bin" and chunk_cursor("chunk-42-007.bin") == 42
    assert chunk_cursor("manifest.json") is None
    assert manifest_cursor(archived_manifest(42)) == 42 and manifest_cursor("manifest.json") is None
    assert checkpoint_tag(42) == "lakesync-checkpoint-42"
    for bad in (
        b"{",
        b'{"snapshotHlc": 5}',
        b'{"snapshotHlc": "x", "generatedAt": "", "chunkCount": 0, "totalDeltas": 0, "chunks": []}',
    ):
        with pytest.raises(ValidationError, match="malformed checkpoint manifest"):
            decode_manifest(bad)
