"""Reader and writer of Magi's "magi-tensors-v1" tensor files, for exchanging weights and batches with Magi.

A file is a pair NAME.json + NAME.bin:

    NAME.json  {"format": "magi-tensors-v1",
                "tensors": [{"name": "tok_embeddings.weight", "dtype": "float32", "shape": [256, 64],
                             "offset": 0, "nbytes": 65536}, ...]}
    NAME.bin   the raw little-endian, C-contiguous bytes of each tensor at its offset.

    import tensor_file
    tensor_file.write_tensors("/tmp/init", {"w": torch.ones(2, 3)})   # writes /tmp/init.json, /tmp/init.bin
    tensors = tensor_file.read_tensors("/tmp/init")                   # OrderedDict name -> CPU tensor

The writer places each tensor at an offset that is a multiple of 64 bytes (any offsets are valid for a
reader) and writes both files atomically: a temporary file in the same folder, flushed and fsync'd, then
os.replace, .bin before .json, so a reader never sees a half-written file. The reader validates the
whole index before reading any data (format tag, entry fields and types, known dtype, non-negative
shape, nbytes == numel * itemsize, offset + nbytes within NAME.bin, unique names, no overlapping byte
ranges) and raises TensorFileError naming the file and the tensor.

Works with PyTorch 1.13 and 2.x (numpy is used for the byte views; bfloat16 travels as int16 bits).
"""

import collections
import json
import os
import sys
import tempfile

import numpy as np
import torch

FORMAT = "magi-tensors-v1"
ALIGNMENT = 64

# dtype name -> (torch dtype, numpy dtype of the same size whose bits we read and write).
_DTYPES = collections.OrderedDict([
    ("float32", (torch.float32, np.dtype("<f4"))),
    ("float64", (torch.float64, np.dtype("<f8"))),
    ("bfloat16", (torch.bfloat16, np.dtype("<i2"))),
    ("float16", (torch.float16, np.dtype("<f2"))),
    ("int64", (torch.int64, np.dtype("<i8"))),
    ("int32", (torch.int32, np.dtype("<i4"))),
])
_NAME_OF = {torch_dtype: name for name, (torch_dtype, _) in _DTYPES.items()}
# Same-size torch dtype through which a tensor is viewed as numpy (numpy has no bfloat16).
_BITS_VIEW = {torch.bfloat16: torch.int16}


class TensorFileError(ValueError):
    """A magi-tensors-v1 file that cannot be read or a tensor that cannot be written; the message names both."""


def split_prefix(prefix):
    """PREFIX, PREFIX.json or PREFIX.bin -> (PREFIX.json, PREFIX.bin)."""
    for ext in (".json", ".bin"):
        if prefix.endswith(ext):
            prefix = prefix[:-len(ext)]
    return prefix + ".json", prefix + ".bin"


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _host_view(tensor):
    """A numpy array sharing memory with the contiguous CPU tensor `tensor` (bfloat16 as int16 bits)."""
    view_dtype = _BITS_VIEW.get(tensor.dtype)
    return (tensor.view(view_dtype) if view_dtype is not None else tensor).numpy()


def _atomic_write(path, write_fn):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            write_fn(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_tensors(prefix, tensors):
    """Writes `tensors` (a mapping or a sequence of (name, tensor) pairs, kept in order) to PREFIX.json +
    PREFIX.bin atomically. Tensors may live on any device, be non-contiguous or require grad; their dtype
    must be one of float32, bfloat16, float16, int64, int32. Returns the index that was written."""
    items = list(tensors.items()) if hasattr(tensors, "items") else list(tensors)
    json_path, bin_path = split_prefix(prefix)
    entries, seen, offset = [], set(), 0
    for name, tensor in items:
        if not isinstance(name, str) or not name:
            raise TensorFileError("%s: tensor name %r must be a non-empty string" % (json_path, name))
        if name in seen:
            raise TensorFileError("%s: tensor '%s' appears twice" % (json_path, name))
        seen.add(name)
        if not isinstance(tensor, torch.Tensor):
            raise TensorFileError("%s: tensor '%s' is a %s, not a torch.Tensor" % (json_path, name, type(tensor).__name__))
        if tensor.dtype not in _NAME_OF:
            raise TensorFileError("%s: tensor '%s' has dtype %s; magi-tensors-v1 holds %s" %
                                  (json_path, name, tensor.dtype, ", ".join(_DTYPES)))
        offset = (offset + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        nbytes = tensor.numel() * tensor.element_size()
        entries.append({"name": name, "dtype": _NAME_OF[tensor.dtype], "shape": list(tensor.shape),
                        "offset": offset, "nbytes": nbytes})
        offset += nbytes

    def write_bin(f):
        position = 0
        for entry, (_, tensor) in zip(entries, items):
            f.write(b"\0" * (entry["offset"] - position))
            position = entry["offset"] + entry["nbytes"]
            if entry["nbytes"] == 0:
                continue
            array = _host_view(tensor.detach().to("cpu").contiguous()).reshape(-1)
            if sys.byteorder != "little":
                array = array.astype(array.dtype.newbyteorder("<"))
            f.write(memoryview(array.view(np.uint8)))

    index = {"format": FORMAT, "tensors": entries}
    _atomic_write(bin_path, write_bin)
    _atomic_write(json_path, lambda f: f.write((json.dumps(index, indent=1) + "\n").encode("utf-8")))
    return index


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def read_index(prefix):
    """Reads and validates PREFIX.json against PREFIX.bin's size; returns the list of entries (dicts)."""
    json_path, bin_path = split_prefix(prefix)
    try:
        with open(json_path, "rb") as f:
            index = json.loads(f.read().decode("utf-8"))
    except OSError as e:
        raise TensorFileError("%s: cannot read: %s" % (json_path, e.strerror or e))
    except ValueError as e:
        raise TensorFileError("%s: not valid JSON: %s" % (json_path, e))
    try:
        bin_size = os.path.getsize(bin_path)
    except OSError as e:
        raise TensorFileError("%s: cannot read the data file %s: %s" % (json_path, bin_path, e.strerror or e))
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        found = index.get("format") if isinstance(index, dict) else type(index).__name__
        raise TensorFileError("%s: format is %r, expected %r" % (json_path, found, FORMAT))
    entries = index.get("tensors")
    if not isinstance(entries, list):
        raise TensorFileError("%s: \"tensors\" must be a list" % json_path)
    seen = set()
    for i, entry in enumerate(entries):
        where = "%s: tensor #%d" % (json_path, i)
        if not isinstance(entry, dict):
            raise TensorFileError("%s is not an object" % where)
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise TensorFileError("%s: \"name\" must be a non-empty string, got %r" % (where, name))
        where = "%s: tensor '%s'" % (json_path, name)
        if name in seen:
            raise TensorFileError("%s appears twice" % where)
        seen.add(name)
        for key in ("dtype", "shape", "offset", "nbytes"):
            if key not in entry:
                raise TensorFileError("%s: missing \"%s\"" % (where, key))
        if entry["dtype"] not in _DTYPES:
            raise TensorFileError("%s: unknown dtype %r (known: %s)" % (where, entry["dtype"], ", ".join(_DTYPES)))
        shape = entry["shape"]
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise TensorFileError("%s: shape must be a list of non-negative integers, got %r" % (where, shape))
        offset, nbytes = entry["offset"], entry["nbytes"]
        if not _is_int(offset) or offset < 0:
            raise TensorFileError("%s: offset must be a non-negative integer, got %r" % (where, offset))
        if not _is_int(nbytes) or nbytes < 0:
            raise TensorFileError("%s: nbytes must be a non-negative integer, got %r" % (where, nbytes))
        expected = _numel(shape) * _DTYPES[entry["dtype"]][1].itemsize
        if nbytes != expected:
            raise TensorFileError("%s: nbytes is %d but %s%s needs %d" % (where, nbytes, entry["dtype"], shape, expected))
        if offset + nbytes > bin_size:
            raise TensorFileError("%s: bytes [%d, %d) lie beyond the end of %s (%d bytes)" %
                                  (where, offset, offset + nbytes, bin_path, bin_size))
    spans = sorted((e["offset"], e["offset"] + e["nbytes"], e["name"]) for e in entries if e["nbytes"] > 0)
    for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
        if start < end:
            raise TensorFileError("%s: tensor '%s' overlaps tensor '%s' in %s" % (json_path, second, first, bin_path))
    return entries


def read_tensors(prefix, names=None):
    """Reads PREFIX.json + PREFIX.bin into an OrderedDict name -> CPU tensor, in the file's order.
    With `names`, reads only those (every one must be in the file) and keeps the file's order."""
    json_path, bin_path = split_prefix(prefix)
    entries = read_index(prefix)
    if names is not None:
        wanted = set(names)
        missing = sorted(wanted - {e["name"] for e in entries})
        if missing:
            raise TensorFileError("%s: no tensor named %s" % (json_path, ", ".join("'%s'" % n for n in missing)))
        entries = [e for e in entries if e["name"] in wanted]
    result = collections.OrderedDict()
    with open(bin_path, "rb") as f:
        for entry in entries:
            torch_dtype, np_dtype = _DTYPES[entry["dtype"]]
            tensor = torch.empty(entry["shape"], dtype=torch_dtype)
            array = _host_view(tensor)
            f.seek(entry["offset"])
            got = f.readinto(memoryview(array.reshape(-1).view(np.uint8))) if entry["nbytes"] else 0
            if got != entry["nbytes"]:
                raise TensorFileError("%s: tensor '%s': read %d of %d bytes at offset %d of %s" %
                                      (json_path, entry["name"], got, entry["nbytes"], entry["offset"], bin_path))
            if sys.byteorder != "little":
                array.byteswap(inplace=True)
            result[entry["name"]] = tensor
    return result
