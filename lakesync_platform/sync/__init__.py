"""The sync engine: what a push writes and what a pull delivers, apart from any store.

* :mod:`.prepare` — validate a batch (ownership, schema, clock drift) and precompute what its
  commit needs, before anything is written;
* :mod:`.plan` — push and server-side append planned as pure folds over loaded row states
  (per-column LWW, effective changes, re-announcements), committed by the store;
* :mod:`.pull` and :mod:`.delivery` — pages cut from row state, and the delivery encodings
  (the TS client's DELETE-0 + full INSERT pair, stamped inserts, the out-of-view DELETE) that
  pulls, checkpoints, WebSocket and cold-tier reads share;
* :mod:`.cursors` — pull cursors and view tags;
* :mod:`.service` — :class:`~.service.SyncService`, the entry points the gateway calls.

The engine imports :mod:`lakesync_platform.core` only; the store it runs against is any
:class:`~lakesync_platform.core.wal.WalStore` (:mod:`lakesync_platform.wal`).
"""
