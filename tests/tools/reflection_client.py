#!/usr/bin/python3
r"""A generic gRPC client that knows nothing of attn's .proto files.

It asks the server's reflection service which services it offers, fetches
their descriptors, and calls a unary method with a JSON request, the way
grpcurl does:

  reflection_client.py 127.0.0.1:50051                      # list services and methods
  reflection_client.py 127.0.0.1:50051 attn.v1.TextGeneration/Generate \
      '{"prompt": "And it came to pass", "max_tokens": 20, "temperature": 0}'

Needs Debian's python3-grpcio and python3-grpc-tools (run with /usr/bin/python3).
"""
import json
import os
import shutil
import sys
import tempfile

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from grpc_tools import protoc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.join(HERE, "..", "..", "proto")


def reflection_stubs():
    """Compiles the reflection protocol's messages and stubs into a temp dir."""
    # Compiled as a top-level module: a "grpc/..." path would shadow the grpc package.
    out = tempfile.mkdtemp(prefix="reflection_")
    source = os.path.join(PROTO_ROOT, "grpc", "reflection", "v1alpha", "reflection.proto")
    shutil.copy(source, os.path.join(out, "reflection.proto"))
    status = protoc.main(["protoc", f"-I{out}", f"--python_out={out}",
                          f"--grpc_python_out={out}", os.path.join(out, "reflection.proto")])
    if status != 0:
        sys.exit("could not compile reflection.proto")
    sys.path.insert(0, out)
    import reflection_pb2  # noqa: E402
    import reflection_pb2_grpc  # noqa: E402
    return reflection_pb2, reflection_pb2_grpc


def main():
    if len(sys.argv) not in (2, 4) or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    channel = grpc.insecure_channel(sys.argv[1])
    pb2, pb2_grpc = reflection_stubs()
    stub = pb2_grpc.ServerReflectionStub(channel)

    def ask(**request):
        reply = next(stub.ServerReflectionInfo(iter([pb2.ServerReflectionRequest(**request)]),
                                               timeout=10))
        if reply.HasField("error_response"):
            raise LookupError(f"{request}: {reply.error_response.error_message}")
        return reply

    try:
        services = [s.name for s in ask(list_services="").list_services_response.service]
    except grpc.RpcError as error:
        sys.exit(f"error: cannot list services at {sys.argv[1]}: {error.code().name}: "
                 f"{error.details()}\nIs the server running there with reflection enabled?")
    pool = descriptor_pool.DescriptorPool()
    added = set()

    def add_file_for(symbol=None, filename=None):
        reply = ask(file_containing_symbol=symbol) if symbol else ask(file_by_filename=filename)
        files = [descriptor_pb2.FileDescriptorProto.FromString(raw)
                 for raw in reply.file_descriptor_response.file_descriptor_proto]
        by_name = {f.name: f for f in files}

        def add(f):  # dependencies first
            if f.name in added:
                return
            for dep in f.dependency:
                if dep not in added:
                    add(by_name[dep]) if dep in by_name else add_file_for(filename=dep)
            pool.Add(f)
            added.add(f.name)

        for f in files:
            add(f)

    described = set()
    for name in services:
        try:
            add_file_for(symbol=name)
            described.add(name)
        except LookupError:
            pass  # gRPC's built-in services (health, reflection) publish no descriptor

    if len(sys.argv) == 2:
        for name in services:
            print(name if name in described else f"{name} (no descriptor published)")
            if name not in described:
                continue
            for method in pool.FindServiceByName(name).methods:
                print(f"  {method.name}({method.input_type.full_name}) returns "
                      f"({'stream ' if method.server_streaming else ''}"
                      f"{method.output_type.full_name})")
        return

    service_name, _, method_name = sys.argv[2].partition("/")
    try:
        method = pool.FindServiceByName(service_name).FindMethodByName(method_name)
    except KeyError:
        sys.exit(f"error: no method {sys.argv[2]!r}; run with the address alone to list them")
    factory = message_factory.MessageFactory(pool)
    request_class = factory.GetPrototype(method.input_type)
    response_class = factory.GetPrototype(method.output_type)
    request = json_format.Parse(sys.argv[3], request_class())
    call = (channel.unary_stream if method.server_streaming else channel.unary_unary)(
        f"/{service_name}/{method_name}", request_serializer=request_class.SerializeToString,
        response_deserializer=response_class.FromString)
    try:
        replies = call(request, timeout=60)
        for reply in (replies if method.server_streaming else [replies]):
            print(json.dumps(json_format.MessageToDict(reply, preserving_proto_field_name=True)))
    except grpc.RpcError as error:
        sys.exit(f"error: {error.code().name}: {error.details()}")


if __name__ == "__main__":
    main()
