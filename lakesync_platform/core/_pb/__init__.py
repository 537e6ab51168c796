"""Classes protoc generates from ``lakesync_v1.proto`` and ``lakesync_platform_v1.proto``
(``scripts/gen_proto.sh``; do not edit)."""
