"""A tiny `glm4` with multimodal RoPE, as convert_hf_to_gguf.py writes the text model of
GLM-4.1V / GLM-4.5V (`rope.dimension_sections`: temporal, height, width, 0). On text
llama.cpp gives the first three sections the token's position, so its M-RoPE rotates
NeoX-style pairs where plain glm4 rotates adjacent ones. See glm4.py and common.py."""
from common import prompt_ids, run_oracle
import dense
import glm4

# rope.dimension_count = HD/2 = 8 rotated values: 4 pairs split 2 + 1 + 1 (+ no vision section).
SECTIONS = [2, 1, 1, 0]
assert sum(SECTIONS) * 2 == dense.HD // 2


def build(gguf, seed):
    t = glm4.build(gguf, seed)
    t.kv("add_rope_dimension_sections", SECTIONS)
    return t


if __name__ == "__main__":
    run_oracle("glm4_mrope", build, [prompt_ids(1, 5), prompt_ids(2, 23), prompt_ids(3, 70)])
