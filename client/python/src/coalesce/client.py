"""Client: one channel to a coalesce-server and a method per RPC."""

import json
import pathlib
from dataclasses import dataclass
from typing import List

import grpc
import numpy as np

from coalesce.errors import CoalesceError
from coalesce.report import KernelReport
from coalesce.shm import SharedMemoryRegion, ShmTensor
from coalesce.tensors import (TensorHandle, TensorSpec, array_to_proto,
                              contiguous, from_proto_dtype, proto_to_array,
                              to_proto_dtype)
from coalesce.v1 import tensor_ops_pb2 as pb
from coalesce.v1 import tensor_ops_pb2_grpc as pb_grpc

# Output placements for output=: keep the output on the server as a new
# handle, or return it inline (the default).
HANDLE = "handle"
INLINE = "inline"

_LAYOUTS = {"NCHW": pb.LAYOUT_NCHW, "NHWC": pb.LAYOUT_NHWC}
_AOS_SOA = {"aos_to_soa": pb.AosSoa.DIRECTION_AOS_TO_SOA,
            "soa_to_aos": pb.AosSoa.DIRECTION_SOA_TO_AOS}
_GELU = {"none": pb.GELU_APPROXIMATION_NONE, "exact": pb.GELU_APPROXIMATION_NONE,
         "tanh": pb.GELU_APPROXIMATION_TANH}


@dataclass(frozen=True)
class TensorList:
    """ListTensors: the caller's tensors and the byte accounting."""

    tensors: List[TensorHandle]
    used_bytes: int
    quota_bytes: int
    total_used_bytes: int
    cap_bytes: int


def _pem(value, what):
    """PEM bytes as given, or read from a path."""
    if value is None or isinstance(value, (bytes, bytearray)):
        return None if value is None else bytes(value)
    data = pathlib.Path(value).read_bytes()
    if not data:
        raise ValueError(f"{what}: {value} is empty")
    return data


def _input(value, field, spec_only=False):
    """An op input as a Tensor: array (inline), TensorHandle or handle string,
    ShmTensor, or (spec_only) a TensorSpec."""
    if value is None:
        return None
    if isinstance(value, TensorHandle):
        t = pb.Tensor(handle=value.handle)
        if value.dtype is not None and value.shape is not None:
            t.dtype = to_proto_dtype(value.dtype)
            t.shape.extend(value.shape)
        return t
    if isinstance(value, str):
        return pb.Tensor(handle=value)
    if isinstance(value, ShmTensor):
        return value.to_proto()
    if isinstance(value, TensorSpec):
        if not spec_only:
            raise TypeError(f"{field}: a TensorSpec has no data; pass an array")
        return pb.Tensor(dtype=to_proto_dtype(value.dtype), shape=value.shape)
    return array_to_proto(value, spec_only=spec_only)


def _output_spec(value, field):
    if value is None or (isinstance(value, str) and value == INLINE):
        return pb.OutputSpec()
    if isinstance(value, str) and value == HANDLE:
        return pb.OutputSpec(placement=pb.OUTPUT_PLACEMENT_SERVER_HANDLE)
    if isinstance(value, TensorHandle):
        return pb.OutputSpec(placement=pb.OUTPUT_PLACEMENT_SERVER_HANDLE,
                             handle=value.handle)
    if isinstance(value, ShmTensor):
        return pb.OutputSpec(placement=pb.OUTPUT_PLACEMENT_SHARED_MEMORY,
                             shared_memory=value.ref())
    raise TypeError(f"{field}: expected coalesce.INLINE, coalesce.HANDLE, a "
                    f"TensorHandle or a ShmTensor, got {type(value).__name__}")


def _options(variant, report, outputs):
    o = pb.ExecutionOptions(variant=variant or "", report=bool(report))
    if any(v is not None and not (isinstance(v, str) and v == INLINE)
           for v in outputs):
        o.outputs.extend(_output_spec(v, f"output {i}")
                         for i, v in enumerate(outputs))
    return o


def _result(t, requested):
    """A response tensor as the caller asked for it."""
    kind = t.WhichOneof("data")
    if kind == "handle":
        return TensorHandle.from_tensor(t)
    if kind == "shared_memory":
        if not isinstance(requested, ShmTensor):
            raise RuntimeError("the server wrote to shared memory unasked")
        return ShmTensor(requested.region, t.shared_memory.offset,
                         tuple(t.shape), from_proto_dtype(t.dtype))
    return proto_to_array(t)


# Request builders, shared by the ops and by explain_selection (spec_only:
# dtype and shape, no data).
def _transpose_request(x, *, variant=None, report=False, output=None,
                       spec_only=False):
    return pb.TransposeRequest(input=_input(x, "input", spec_only),
                               options=_options(variant, report, [output]))


def _gemm_request(a, b, c=None, *, trans_a=False, trans_b=False, alpha=None,
                  beta=None, allow_tf32=False, variant=None, report=False,
                  output=None, spec_only=False):
    r = pb.GemmRequest(a=_input(a, "a", spec_only), b=_input(b, "b", spec_only),
                       trans_a=trans_a, trans_b=trans_b, allow_tf32=allow_tf32,
                       options=_options(variant, report, [output]))
    if c is not None:
        r.c.CopyFrom(_input(c, "c", spec_only))
    if alpha is not None:
        r.alpha = alpha
    if beta is not None:
        r.beta = beta
    return r


def _convert_layout_request(x, *, layouts=None, permutation=None,
                            aos_soa=None, fields=0, variant=None, report=False,
                            output=None, spec_only=False):
    given = [n for n, v in (("layouts", layouts), ("permutation", permutation),
                            ("aos_soa", aos_soa)) if v is not None]
    if len(given) != 1:
        raise ValueError("convert_layout: give exactly one of layouts=(FROM, "
                         "TO), permutation=[...], aos_soa='aos_to_soa'|"
                         f"'soa_to_aos' (got {given or 'none'})")
    r = pb.ConvertLayoutRequest(input=_input(x, "input", spec_only),
                                options=_options(variant, report, [output]))
    if layouts is not None:
        src, dst = layouts
        try:
            r.layouts.CopyFrom(pb.LayoutPair(**{"from": _LAYOUTS[src.upper()],
                                                "to": _LAYOUTS[dst.upper()]}))
        except KeyError as e:
            raise ValueError(f"layouts: {e} is not NCHW or NHWC") from None
    elif permutation is not None:
        r.permutation.perm.extend(int(p) for p in permutation)
    else:
        if aos_soa not in _AOS_SOA:
            raise ValueError("aos_soa: 'aos_to_soa' or 'soa_to_aos'")
        r.aos_soa.direction = _AOS_SOA[aos_soa]
        r.aos_soa.fields = fields
    return r


def _gelu_layer_norm_request(x, bias=None, residual=None, gamma=None,
                             beta=None, *, epsilon=None, approximation="none",
                             return_pre_norm=False, variant=None,
                             report=False, output=None, h_output=None,
                             spec_only=False):
    if approximation not in _GELU:
        raise ValueError("approximation: 'none' (exact erf) or 'tanh'")
    if h_output is not None and not return_pre_norm:
        raise ValueError("h_output needs return_pre_norm=True")
    r = pb.GeluLayerNormRequest(
        x=_input(x, "x", spec_only), approximation=_GELU[approximation],
        return_pre_norm=return_pre_norm,
        options=_options(variant, report,
                         [output, h_output] if return_pre_norm else [output]))
    for name, value in (("bias", bias), ("residual", residual),
                        ("gamma", gamma), ("beta", beta)):
        if value is not None:
            getattr(r, name).CopyFrom(_input(value, name, spec_only))
    if epsilon is not None:
        r.epsilon = epsilon
    return r


_BUILDERS = {"transpose": _transpose_request, "gemm": _gemm_request,
             "convert_layout": _convert_layout_request,
             "gelu_layer_norm": _gelu_layer_norm_request}


class Client:
    """A connection to a coalesce-server.

    target: "HOST:PORT", or "unix:PATH" for the server's --unix_socket (the
    only way shared memory can be registered).
    TLS: root_certificates (the CA that signed the server's certificate),
    and for mutual TLS certificate_chain and private_key; each PEM bytes or a
    file path. tls=True without root_certificates trusts the system roots.
    server_name overrides the name checked in the server's certificate.
    token: a bearer token (--auth_tokens), sent as "authorization: Bearer".
    client_id: the x-coalesce-client identity tensors are charged to.
    timeout: seconds per call unless a call passes its own.
    load_balancing: "round_robin" spreads calls over every address the
    target names ("ipv4:HOST:PORT,HOST:PORT", "dns:///NAME:PORT"); None or
    "pick_first" (gRPC's default) keeps one. Handles live on the server that
    made them, so spread calls suit inline and shared-memory data.

    Op methods return NumPy arrays (or a TensorHandle / ShmTensor where
    output= asked for one); with report=True they return (result,
    KernelReport). A failed call raises CoalesceError.
    """

    def __init__(self, target, *, root_certificates=None,
                 certificate_chain=None, private_key=None, server_name=None,
                 tls=None, token=None, client_id=None, timeout=60.0,
                 max_message_bytes=2**31 - 1, chunk_bytes=1 << 20,
                 load_balancing=None, channel_options=()):
        if (certificate_chain is None) != (private_key is None):
            raise ValueError("certificate_chain and private_key: give both "
                             "or neither")
        if tls is None:
            tls = any(v is not None for v in (root_certificates,
                                              certificate_chain, server_name))
        if not tls and (certificate_chain is not None
                        or root_certificates is not None
                        or server_name is not None):
            raise ValueError("TLS options given with tls=False")
        if chunk_bytes < 1:
            raise ValueError("chunk_bytes must be >= 1")
        if load_balancing not in (None, "round_robin", "pick_first"):
            raise ValueError("load_balancing must be round_robin or "
                             f"pick_first, got {load_balancing!r}")
        options = [("grpc.max_send_message_length", max_message_bytes),
                   ("grpc.max_receive_message_length", max_message_bytes)]
        if load_balancing:
            options.append(("grpc.service_config", json.dumps(
                {"loadBalancingConfig": [{load_balancing: {}}]})))
        if server_name:
            options.append(("grpc.ssl_target_name_override", server_name))
        options.extend(channel_options)
        if tls:
            creds = grpc.ssl_channel_credentials(
                root_certificates=_pem(root_certificates, "root_certificates"),
                private_key=_pem(private_key, "private_key"),
                certificate_chain=_pem(certificate_chain, "certificate_chain"))
            self._channel = grpc.secure_channel(target, creds, options)
        else:
            self._channel = grpc.insecure_channel(target, options)
        self.target = target
        self.timeout = timeout
        self.chunk_bytes = int(chunk_bytes)
        self._metadata = []
        if token:
            # Per-call metadata rather than call credentials: gRPC refuses
            # those on a plaintext channel, where a server may still take a
            # token (e.g. behind a TLS-terminating proxy).
            self._metadata.append(("authorization", f"Bearer {token}"))
        if client_id:
            self._metadata.append(("x-coalesce-client", client_id))
        self._stub = pb_grpc.TensorOpsStub(self._channel)

    # -- plumbing
    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request, timeout):
        try:
            return getattr(self._stub, method)(
                request, timeout=self.timeout if timeout is None else timeout,
                metadata=self._metadata)
        except grpc.RpcError as e:
            raise CoalesceError.from_rpc_error(e, method) from None

    @staticmethod
    def _answer(result, response, report):
        if report:
            return result, KernelReport.from_proto(response.report)
        return result

    # -- ops
    def transpose(self, x, *, variant=None, report=False, output=None,
                  timeout=None):
        """[M,N] -> [N,M], [B,M,N] -> [B,N,M]."""
        request = _transpose_request(x, variant=variant, report=report,
                                     output=output)
        response = self._call("Transpose", request, timeout)
        return self._answer(_result(response.output, output), response, report)

    def gemm(self, a, b, c=None, *, trans_a=False, trans_b=False, alpha=None,
             beta=None, allow_tf32=False, variant=None, report=False,
             output=None, timeout=None):
        """D = alpha * op(A) @ op(B) + beta * C (batched over a leading dim)."""
        request = _gemm_request(a, b, c, trans_a=trans_a, trans_b=trans_b,
                                alpha=alpha, beta=beta, allow_tf32=allow_tf32,
                                variant=variant, report=report, output=output)
        response = self._call("Gemm", request, timeout)
        return self._answer(_result(response.d, output), response, report)

    def convert_layout(self, x, *, layouts=None, permutation=None,
                       aos_soa=None, fields=0, variant=None, report=False,
                       output=None, timeout=None):
        """One of: layouts=("NCHW", "NHWC") (or back), permutation=[...]
        (output.shape[i] = x.shape[perm[i]]), aos_soa="aos_to_soa" ([N,F] ->
        [F,N]) or "soa_to_aos" with fields (0: from the shape)."""
        request = _convert_layout_request(
            x, layouts=layouts, permutation=permutation, aos_soa=aos_soa,
            fields=fields, variant=variant, report=report, output=output)
        response = self._call("ConvertLayout", request, timeout)
        return self._answer(_result(response.output, output), response, report)

    def gelu_layer_norm(self, x, bias=None, residual=None, gamma=None,
                        beta=None, *, epsilon=None, approximation="none",
                        return_pre_norm=False, variant=None, report=False,
                        output=None, h_output=None, timeout=None):
        """y = LayerNorm(gelu(x + bias) + residual) * gamma + beta over the
        last dimension. Returns y, or (y, h) with return_pre_norm."""
        request = _gelu_layer_norm_request(
            x, bias, residual, gamma, beta, epsilon=epsilon,
            approximation=approximation, return_pre_norm=return_pre_norm,
            variant=variant, report=report, output=output, h_output=h_output)
        response = self._call("GeluLayerNorm", request, timeout)
        y = _result(response.y, output)
        result = (y, _result(response.h, h_output)) if return_pre_norm else y
        return self._answer(result, response, report)

    # -- the server
    def server_info(self, *, timeout=None):
        """GetServerInfoResponse: backend, devices, build, limits, variants."""
        return self._call("GetServerInfo", pb.GetServerInfoRequest(), timeout)

    def explain_selection(self, op, *args, measure=False, timeout=None,
                          **kwargs):
        """Which variant the server would pick for op ("transpose", "gemm",
        "convert_layout", "gelu_layer_norm") called with these arguments
        (arrays or TensorSpec: only dtype and shape are sent), and why.
        Returns the ExplainSelectionResponse."""
        if op not in _BUILDERS:
            raise ValueError(f"op: one of {sorted(_BUILDERS)}, not {op!r}")
        inner = _BUILDERS[op](*args, spec_only=True, **kwargs)
        request = pb.ExplainSelectionRequest(measure=measure)
        getattr(request, op).CopyFrom(inner)
        return self._call("ExplainSelection", request, timeout)

    def echo(self, payload, *, timeout=None):
        return self._call("Echo", pb.EchoRequest(payload=payload),
                          timeout).payload

    # -- tensors kept on the server
    def put_tensor(self, array, *, name=None, chunk_bytes=None, timeout=None,
                   device=None):
        """Uploads array in chunks; returns its TensorHandle. device: the
        ordinal of the server device to keep it on (None: the server's
        choice)."""
        array = contiguous(array)
        step = int(chunk_bytes or self.chunk_bytes)
        if step < 1:
            raise ValueError("chunk_bytes must be >= 1")
        flat = array.reshape(-1).view(np.uint8)

        def parts():
            header = pb.PutTensorHeader(
                dtype=to_proto_dtype(array.dtype), shape=array.shape,
                name=name or "")
            if device is not None:
                header.device_ordinal = int(device)
            yield pb.PutTensorRequest(header=header)
            for start in range(0, flat.size, step):
                yield pb.PutTensorRequest(
                    chunk=flat[start:start + step].tobytes())

        response = self._call("PutTensor", parts(), timeout)
        return TensorHandle.from_info(response.tensor)

    def get_tensor(self, handle, *, chunk_bytes=0, timeout=None):
        """Downloads a tensor kept on the server as a NumPy array."""
        request = pb.GetTensorRequest(handle=str(handle),
                                      chunk_bytes=chunk_bytes)
        try:
            stream = self._stub.GetTensor(
                request, timeout=self.timeout if timeout is None else timeout,
                metadata=self._metadata)
            info, data, filled = None, None, 0
            for message in stream:
                if info is None:
                    info = message.tensor
                    data = bytearray(info.byte_size)
                chunk = message.chunk
                if filled + len(chunk) > len(data):
                    raise CoalesceError(grpc.StatusCode.INTERNAL,
                                        "more bytes than the tensor holds",
                                        "GetTensor")
                data[filled:filled + len(chunk)] = chunk
                filled += len(chunk)
        except grpc.RpcError as e:
            raise CoalesceError.from_rpc_error(e, "GetTensor") from None
        if info is None or filled != len(data):
            raise CoalesceError(
                grpc.StatusCode.INTERNAL,
                f"stream ended after {filled} of "
                f"{0 if info is None else info.byte_size} bytes", "GetTensor")
        return np.frombuffer(data, dtype=from_proto_dtype(info.dtype)).reshape(
            tuple(info.shape))

    def delete_tensor(self, handle, *, timeout=None):
        """Frees a tensor kept on the server; returns the bytes freed."""
        return self._call("DeleteTensor",
                          pb.DeleteTensorRequest(handle=str(handle)),
                          timeout).freed_bytes

    def delete_tensors(self, handles, *, timeout=None):
        """Frees several tensors in one call, all of them or none (the error
        names the handle that stopped it); returns the bytes freed."""
        return self._call(
            "DeleteTensor",
            pb.DeleteTensorRequest(handles=[str(h) for h in handles]),
            timeout).freed_bytes

    def list_tensors(self, *, timeout=None):
        r = self._call("ListTensors", pb.ListTensorsRequest(), timeout)
        return TensorList(
            tensors=[TensorHandle.from_info(t) for t in r.tensors],
            used_bytes=r.used_bytes, quota_bytes=r.quota_bytes,
            total_used_bytes=r.total_used_bytes, cap_bytes=r.cap_bytes)

    # -- shared memory
    def register_shared_memory(self, name, key, byte_size, *, offset=0,
                               timeout=None):
        self._call("RegisterSharedMemory", pb.RegisterSharedMemoryRequest(
            name=name, key=key, offset=offset, byte_size=byte_size), timeout)

    def unregister_shared_memory(self, name, *, timeout=None):
        self._call("UnregisterSharedMemory",
                   pb.UnregisterSharedMemoryRequest(name=name), timeout)

    def list_shared_memory(self, *, timeout=None):
        """The caller's registered regions (SharedMemoryRegion messages)."""
        return list(self._call("ListSharedMemory",
                               pb.ListSharedMemoryRequest(), timeout).regions)

    def shared_memory(self, byte_size, *, name=None, key_prefix="/coalesce"):
        """Creates a POSIX shared-memory object of byte_size and registers
        it: a SharedMemoryRegion, best used as a context manager."""
        return SharedMemoryRegion(self, byte_size, name=name,
                                  key_prefix=key_prefix)
