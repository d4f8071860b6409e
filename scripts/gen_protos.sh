#!/usr/bin/env bash
# Regenerate hybridsim/service/_gen/ from hybridsim/service/protos/ (the generated code is checked in, so a user
# needs only grpcio + protobuf at run time).
#
# Generator pinned: grpcio-tools==1.85.1 (bundled libprotoc 35.1 -> protobuf Python gencode 7.35.1). The generated
# modules check at import that the runtime is at least that: grpcio>=1.85.1, protobuf>=7.35.1.
# Usage: scripts/gen_protos.sh            (run from anywhere; needs `pip install grpcio-tools==1.85.1`)
set -euo pipefail
cd "$(dirname "$0")/.."
PINNED=1.85.1
have=$(python3 -c 'from importlib.metadata import version; print(version("grpcio-tools"))')
if [ "$have" != "$PINNED" ]; then
  echo "gen_protos.sh: grpcio-tools $have installed, pinned $PINNED (pip install grpcio-tools==$PINNED)" >&2
  [ "${ALLOW_OTHER_GRPCIO_TOOLS:-0}" = 1 ] || exit 2
fi
PROTOS=hybridsim/service/protos
OUT=hybridsim/service/_gen
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m grpc_tools.protoc -I "$PROTOS" --python_out="$tmp" --pyi_out="$tmp" --grpc_python_out="$tmp" \
  "$PROTOS"/hybridsim/v1/*.proto
mkdir -p "$OUT"
rm -f "$OUT"/*_pb2*.py "$OUT"/*_pb2*.pyi
for f in "$tmp"/hybridsim/v1/*; do
  # the generator writes absolute imports (`from hybridsim.v1 import common_pb2`); make them package-relative
  sed -E 's/^from hybridsim\.v1 import ([a-z_0-9]+_pb2) as /from . import \1 as /' "$f" > "$OUT/$(basename "$f")"
done
cat > "$OUT/__init__.py" <<PY
"""Generated gRPC/protobuf code for hybridsim/service/protos (do not edit; run scripts/gen_protos.sh).

Generator: grpcio-tools==$PINNED (libprotoc $(python3 -m grpc_tools.protoc --version | awk '{print $2}')).
"""
PY
echo "generated: $(ls "$OUT")"
