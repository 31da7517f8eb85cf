"""rankd_proto_library: C++ protobuf + gRPC code from the system protoc.

Bazel 4 cannot use Debian's protobuf/gRPC Bazel rules offline, so a genrule
calls /usr/bin/protoc with /usr/bin/grpc_cpp_plugin and the result is wrapped
in a cc_library. Imports are relative to the proto/ folder
(e.g. `import "rankd/v1/common.proto";`).
"""

def rankd_proto_library(name, srcs, deps = [], visibility = None):
    """Generates <name> (cc_library) from srcs (paths relative to proto/)."""
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [
            base + ".pb.h",
            base + ".pb.cc",
            base + ".grpc.pb.h",
            base + ".grpc.pb.cc",
        ]
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = " ".join([
            "protoc",
            "--proto_path=" + native.package_name(),
            "--cpp_out=$(RULEDIR)",
            "--grpc_out=$(RULEDIR)",
            "--plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin)",
        ] + ["$(location %s)" % s for s in srcs]),
    )
    native.filegroup(
        name = name + "_srcs",
        srcs = srcs,
        visibility = visibility,
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        deps = deps + ["//third_party:grpc", "//third_party:protobuf"],
        visibility = visibility,
    )
