"""Minimal GGUF v3 reader and writer for the demo-model recipe.

Only what the recipe needs: scalar, string and array metadata, F32 tensors
on write; any tensor type on read (returned as raw bytes).  The engine has
its own validated C reader; this one trusts its input (files it wrote or
the reference files).
"""

import struct

GGUF_MAGIC = b"GGUF"
ALIGN = 32

T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, \
    T_U64, T_I64, T_F64 = range(13)

_SCALAR = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I",
           T_I32: "<i", T_F32: "<f", T_BOOL: "<?", T_U64: "<Q", T_I64: "<q",
           T_F64: "<d"}


class Reader:
    def __init__(self, path):
        self.buf = open(path, "rb").read()
        self.off = 0
        if self.buf[:4] != GGUF_MAGIC:
            raise ValueError(f"{path}: not a GGUF file")
        self.off = 4
        self.version = self._u32()
        n_tensors = self._u64()
        n_kv = self._u64()
        self.kv = {}
        for _ in range(n_kv):
            k = self._str()
            t = self._u32()
            self.kv[k] = self._val(t)
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._str()
            nd = self._u32()
            ne = [self._u64() for _ in range(nd)]
            typ = self._u32()
            off = self._u64()
            self.tensors[name] = (ne, typ, off)
        align = self.kv.get("general.alignment", ALIGN)
        self.data = (self.off + align - 1) // align * align

    def _u32(self):
        v = struct.unpack_from("<I", self.buf, self.off)[0]
        self.off += 4
        return v

    def _u64(self):
        v = struct.unpack_from("<Q", self.buf, self.off)[0]
        self.off += 8
        return v

    def _str(self):
        n = self._u64()
        s = self.buf[self.off:self.off + n].decode("utf-8", "replace")
        self.off += n
        return s

    def _val(self, t):
        if t == T_STR:
            return self._str()
        if t == T_ARR:
            et = self._u32()
            n = self._u64()
            return [self._val(et) for _ in range(n)]
        fmt = _SCALAR[t]
        v = struct.unpack_from(fmt, self.buf, self.off)[0]
        self.off += struct.calcsize(fmt)
        return v

    def tensor_bytes(self, name, nbytes):
        ne, typ, off = self.tensors[name]
        return self.buf[self.data + off:self.data + off + nbytes]


class Writer:
    """Collects metadata and F32 tensors, then writes the file at once."""

    def __init__(self):
        self.kv = []
        self.tensors = []

    def add(self, key, typ, value, elem=None):
        self.kv.append((key, typ, value, elem))

    def u32(self, k, v): self.add(k, T_U32, v)
    def i32(self, k, v): self.add(k, T_I32, v)
    def f32(self, k, v): self.add(k, T_F32, v)
    def bool(self, k, v): self.add(k, T_BOOL, v)
    def str(self, k, v): self.add(k, T_STR, v)
    def arr(self, k, elem, v): self.add(k, T_ARR, v, elem)

    def tensor(self, name, array):
        """array: numpy float32, shape in row-major (outermost first)."""
        self.tensors.append((name, array))

    @staticmethod
    def _s(s):
        b = s.encode("utf-8") if isinstance(s, str) else s
        return struct.pack("<Q", len(b)) + b

    def _v(self, typ, v, elem):
        if typ == T_STR:
            return self._s(v)
        if typ == T_ARR:
            out = struct.pack("<IQ", elem, len(v))
            if elem == T_STR:
                return out + b"".join(self._s(x) for x in v)
            return out + struct.pack("<%d%s" % (len(v), _SCALAR[elem][1]), *v)
        return struct.pack(_SCALAR[typ], v)

    def write(self, path):
        import numpy as np
        head = [GGUF_MAGIC, struct.pack("<IQQ", 3, len(self.tensors),
                                        len(self.kv))]
        for k, t, v, e in self.kv:
            head.append(self._s(k) + struct.pack("<I", t) + self._v(t, v, e))
        off = 0
        blobs = []
        for name, a in self.tensors:
            a = np.ascontiguousarray(a, dtype=np.float32)
            ne = list(reversed(a.shape))
            head.append(self._s(name) + struct.pack("<I", len(ne)) +
                        b"".join(struct.pack("<Q", n) for n in ne) +
                        struct.pack("<IQ", 0, off))
            b = a.tobytes()
            pad = (-len(b)) % ALIGN
            blobs.append(b + b"\0" * pad)
            off += len(b) + pad
        h = b"".join(head)
        h += b"\0" * ((-len(h)) % ALIGN)
        with open(path, "wb") as f:
            f.write(h)
            for b in blobs:
                f.write(b)
