#!/usr/bin/env python3
"""prep.py OUT COMMON KERNEL NAME: common.cuh + a kernel file, rewritten
for the CPU emulator (simt.h): extern "C" dropped (two versions of a
kernel then live in two namespaces), each extern __shared__ array made a
pointer to the block's dynamic shared memory, the inline-PTX helpers that
simt.h emulates removed, and the two PTX conversions replaced by simt.h's.
The kernel sources themselves stay as NVRTC compiles them."""
import re
import sys

# The helpers simt.h defines in their place.
EMULATED = ["mma_bf16", "mma_s8", "bf2", "cp_async16", "cp_async_commit", "cp_async_wait1", "cp_async_wait0",
            "ldsm_x4", "ldsm_x2_trans", "ld_stream"]
CVT = {
    r'asm\("cvt\.f32\.f16 %0, %1;" : "=f"\((\w+)\) : "h"\((\w+)\)\);': r'\1 = simt_f16_to_f32(\2);',
    r'asm\("cvt\.rn\.f16\.f32 %0, %1;" : "=h"\((\w+)\) : "f"\((\w+)\)\);': r'\1 = simt_f32_to_f16(\2);',
}


def drop(src, name):
    """Removes the definition of device function name (through its closing brace)."""
    m = re.search(r'__device__ __forceinline__ [\w ]+?\b' + name + r'\(', src)
    if not m:
        return src
    i = src.index('{', m.end())
    depth = 0
    for j in range(i, len(src)):
        if src[j] == '{':
            depth += 1
        elif src[j] == '}':
            depth -= 1
            if depth == 0:
                return src[:m.start()] + src[j + 1:]
    sys.exit('prep: unbalanced braces after ' + name)


def main():
    out, common, kernel, name = sys.argv[1:5]
    src = open(common).read() + '\n#line 1 "%s"\n' % name + open(kernel).read()
    src = src.replace('extern "C" ', '')
    src = re.sub(r'extern __shared__ (?:__align__\(\d+\) )?([\w ]*\w) (\w+)\[\];', r'\1 *\2 = SIMT_DYN(\1);', src)
    for fn in EMULATED:
        src = drop(src, fn)
    for pat, rep in CVT.items():
        src = re.sub(pat, rep, src)
    open(out, 'w').write(src)


main()
