"""Generates the gRPC stubs from the repository's proto/ while building.

The .proto files are found in ./proto (an sdist, which carries a copy) or in
../../proto (a checkout of the repository: `pip install ./client/python`).
Installing from source therefore needs the repository checkout or an sdist
made from one.
"""

import importlib.metadata
import pathlib
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = pathlib.Path(__file__).resolve().parent
PROTO_FILES = ["coalesce/v1/tensor_ops.proto"]


def proto_root():
    for root in (HERE / "proto", HERE.parent.parent / "proto"):
        if all((root / f).is_file() for f in PROTO_FILES):
            return root
    raise RuntimeError(
        "coalesce: cannot find proto/coalesce/v1/tensor_ops.proto in "
        f"{HERE / 'proto'} or {HERE.parent.parent / 'proto'}; build from a "
        "checkout of the Coalesce repository (pip install ./client/python) "
        "or from an sdist made there")


def generate(out_dir):
    # Imported here: only the build needs grpcio-tools.
    from grpc_tools import protoc
    import grpc_tools

    root = proto_root()
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    include = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    args = ["grpc_tools.protoc", f"-I{root}", f"-I{include}",
            f"--python_out={out_dir}", f"--grpc_python_out={out_dir}"]
    args += [str(root / f) for f in PROTO_FILES]
    if protoc.main(args) != 0:
        raise RuntimeError(f"grpc_tools.protoc failed: {' '.join(args)}")
    # The stubs import `coalesce.v1.tensor_ops_pb2`: inside this package.
    (out_dir / "coalesce" / "v1" / "__init__.py").touch()


class BuildPyWithProto(build_py):
    def run(self):
        super().run()
        # An editable install imports from src/, so the stubs go there.
        generate(HERE / "src" if self.editable_mode else self.build_lib)


class SdistWithProto(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        root = proto_root()
        for f in PROTO_FILES:
            target = pathlib.Path(base_dir) / "proto" / f
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / f, target)


def major_minor(package):
    return ".".join(importlib.metadata.version(package).split(".")[:2])


def runtime_requirements():
    # Generated code checks that grpcio and protobuf are at least the
    # versions that generated it; these bounds make pip install such.
    try:
        grpc = importlib.metadata.version("grpcio-tools")
        proto = major_minor("protobuf")
    except importlib.metadata.PackageNotFoundError:
        grpc, proto = "1.62", "4.25"  # metadata only (no build env)
    return [f"grpcio>={grpc}", f"protobuf>={proto}", "numpy>=1.22",
            "ml_dtypes>=0.2"]


setup(
    install_requires=runtime_requirements(),
    cmdclass={"build_py": BuildPyWithProto, "sdist": SdistWithProto},
)
