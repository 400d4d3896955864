"""The two XLA FFI handlers of :mod:`shardbook.coba.kernels`, as numba cfuncs, and
everything they know of XLA's C API (``xla/ffi/api/c_api.h``).

numba caches their machine code (``cache=True``: 0.8 s to compile, 0.1 s to load),
tells a stale entry only by this file's hash, and freezes the globals it reads: so
every constant they bake in lives in this file.
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["API_VERSION", "compact", "push"]

# The C API version the offsets below were checked against (jaxlib 0.10.2 ships 0.3),
# and the handshake's answer; on another version kernels registers nothing.
API_VERSION = (0, 3)
_MAJOR, _MINOR = API_VERSION

# Byte offsets in the structs of xla/ffi/api/c_api.h (x86-64 and aarch64: 8-byte
# pointers, size_t and int64; an enum is 4 bytes, padded to 8 before a pointer).
# XLA_FFI_CallFrame: struct_size, extension_start, api, ctx, stage, args, rets, ...
_FRAME_EXT, _FRAME_STAGE, _FRAME_ARGS, _FRAME_RETS = 8, 32, 40, 80
# XLA_FFI_Args / XLA_FFI_Rets: struct_size, extension_start, size, types, args/rets
_LIST_SIZE, _LIST_PTRS = 16, 32
# XLA_FFI_Buffer: struct_size, extension_start, dtype, data, rank, dims
_BUF_DATA, _BUF_DIMS = 24, 40
# XLA_FFI_Extension_Base: struct_size, type, next; the metadata extension adds a pointer
_EXT_TYPE, _EXT_NEXT, _EXT_METADATA = 8, 16, 24
# XLA_FFI_Metadata: struct_size, api_version {struct_size, extension_start, major,
# minor}, traits
_META_MAJOR, _META_MINOR, _META_TRAITS = 24, 28, 32
_EXTENSION_METADATA = 1      # XLA_FFI_Extension_Metadata
_STAGE_EXECUTE = 3           # XLA_FFI_ExecutionStage_EXECUTE


@intrinsic
def _at(typingctx, base, offset):  # the int64 stored at address base + offset
    sig = types.int64(types.int64, types.int64)

    def codegen(context, builder, signature, args):
        addr = builder.add(args[0], args[1])
        ptr = builder.inttoptr(addr, ir.IntType(64).as_pointer())
        return builder.load(ptr)
    return sig, codegen


@intrinsic
def _put32(typingctx, addr, value):  # store an int32 at an address
    sig = types.void(types.int64, types.int32)

    def codegen(context, builder, signature, args):
        ptr = builder.inttoptr(args[0], ir.IntType(32).as_pointer())
        builder.store(args[1], ptr)
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def _view(typingctx, addr, dtype):  # a raw address as a typed pointer
    ty = dtype.dtype if isinstance(dtype, types.DType) else dtype.instance_type
    sig = types.CPointer(ty)(types.int64, dtype)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(
            args[0], context.get_value_type(signature.return_type)
        )
    return sig, codegen


@numba.njit(inline="always")
def _metadata_query(frame):  # answer XLA's handshake; True if it was one
    ext = _at(frame, _FRAME_EXT)
    while ext != 0:
        if (_at(ext, _EXT_TYPE) & 0xFFFFFFFF) == _EXTENSION_METADATA:
            meta = _at(ext, _EXT_METADATA)
            _put32(meta + _META_MAJOR, np.int32(_MAJOR))
            _put32(meta + _META_MINOR, np.int32(_MINOR))
            _put32(meta + _META_TRAITS, np.int32(0))
            return True
        ext = _at(ext, _EXT_NEXT)
    return False


@numba.njit(inline="always")
def _array(frame, which, i, dtype):  # arg/ret i (which) of the frame, 1-d, as dtype
    buf = _at(_at(frame, which + _LIST_PTRS), 8 * i)
    n = _at(_at(buf, _BUF_DIMS), 0)
    return numba.carray(_view(_at(buf, _BUF_DATA), dtype), (n,))


@numba.njit(inline="always")
def _executing(frame):  # not the handshake, and the execute stage
    return (not _metadata_query(frame)
            and (_at(frame, _FRAME_STAGE) & 0xFFFFFFFF) == _STAGE_EXECUTE)


# XLA_FFI_Error* handler(XLA_FFI_CallFrame*): both pointers travel as 64-bit integers
# (the same registers in the x86-64 and aarch64 C ABIs); 0 is success.
def _handler(fn):
    sig = types.int64(types.int64)
    try:
        return numba.cfunc(sig, nopython=True, cache=True)(fn)
    except RuntimeError as err:  # no writable cache location: compile uncached
        if "cannot cache function" not in str(err):
            raise
        return numba.cfunc(sig, nopython=True)(fn)


@_handler
def compact(frame):
    if _executing(frame):
        spikes = _array(frame, _FRAME_ARGS, 0, numba.uint8)
        ids = _array(frame, _FRAME_RETS, 0, numba.int32)
        count = _array(frame, _FRAME_RETS, 1, numba.int32)
        n, cap = len(spikes), len(ids)
        c = 0
        for i in range(n):
            if spikes[i]:
                if c < cap:
                    ids[c] = i
                c += 1
        for k in range(min(c, cap), cap):
            ids[k] = n
        count[0] = c
    return 0


@_handler
def push(frame):
    if _executing(frame):
        ids = _array(frame, _FRAME_ARGS, 0, numba.int32)
        indptr = _array(frame, _FRAME_ARGS, 1, numba.int32)
        indices = _array(frame, _FRAME_ARGS, 2, numba.int32)
        out = _array(frame, _FRAME_RETS, 0, numba.float32)
        events = _array(frame, _FRAME_RETS, 1, numba.int32)
        out[:] = 0.0
        n_pre = len(indptr) - 1
        total = 0
        for k in range(len(ids)):
            j = ids[k]
            if 0 <= j < n_pre:
                total += indptr[j + 1] - indptr[j]
                for s in range(indptr[j], indptr[j + 1]):
                    out[indices[s]] += 1.0
        events[0] = total
    return 0
