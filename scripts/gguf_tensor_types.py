"""Tensor type counts of GGUF files: python3 scripts/gguf_tensor_types.py FILE.gguf...

Prints, per file, its size, general.file_type and how many tensors of each ggml type it
holds (with the tensor names of the rarer types). Needs `pip install gguf`.
"""
import collections
import os
import sys

from gguf import GGUFReader
from gguf.constants import LlamaFileType


def file_type(r):
    f = r.get_field("general.file_type")
    if f is None:
        return "?"
    v = int(f.parts[f.data[0]][0])
    try:
        return LlamaFileType(v).name
    except ValueError:
        return str(v)


for path in sys.argv[1:]:
    r = GGUFReader(path)
    counts = collections.Counter(t.tensor_type.name for t in r.tensors)
    names = collections.defaultdict(list)
    for t in r.tensors:
        names[t.tensor_type.name].append(t.name)
    size = os.path.getsize(path)
    print(f"{os.path.basename(path)}: {size} bytes ({size / 2**20:.1f} MiB), file_type {file_type(r)}, "
          f"{len(r.tensors)} tensors")
    for ty, n in counts.most_common():
        extra = ""
        if n <= 8:
            extra = "  [" + ", ".join(names[ty]) + "]"
        print(f"    {ty:8s} {n:4d}{extra}")
