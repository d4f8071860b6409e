"""Generated gRPC/protobuf code for hybridsim/service/protos (do not edit; run scripts/gen_protos.sh).

Generator: grpcio-tools==1.85.1 (libprotoc 35.1).
"""
