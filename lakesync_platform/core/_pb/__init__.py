"""Classes protoc generates from ``lakesync_v1.proto`` (``scripts/gen_proto.sh``; do not edit)."""
