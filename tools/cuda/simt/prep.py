#!/usr/bin/env python3
"""prep.py OUT COMMON KERNEL NAME: common.cuh + a kernel file, rewritten
for the CPU emulator (simt.h): extern "C" dropped (two versions of a
kernel then live in two namespaces), each extern __shared__ array made a
pointer to the block's dynamic shared memory, the inline-PTX helpers that
simt.h emulates removed, and the two PTX conversions replaced by simt.h's.
The kernel sources themselves stay as NVRTC compiles them.

prep.py --module OUT SRC: SRC (what NVRTC was handed: common.cuh and a
kernel file) rewritten likewise, plus, for every kernel, the entry points
simcuda's cuLaunchKernel calls (simt_launch_<kernel>: the grid, block,
shared memory and the launch's parameter slots) and the sizes of its
parameters (simt_args_<kernel>, for graph capture)."""
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


KERNEL = re.compile(r'extern "C"\s+__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(\w+)\s*\(([^)]*)\)')


def trampolines(src):
    """The simcuda entry points of the kernels declared in src."""
    out = ['\n// simcuda entry points (tools/cuda/simt/prep.py --module).']
    for m in KERNEL.finditer(src):
        name, params = m.group(1), [p.strip() for p in m.group(2).split(',') if p.strip()]
        types = []
        for p in params:
            pm = re.match(r'(.*?)(\w+)$', p, re.S)
            types.append(' '.join(pm.group(1).split()))
        args = ', '.join('*(%s *)p[%d]' % (t, i) for i, t in enumerate(types))
        sizes = ', '.join(['(int)sizeof(%s)' % t for t in types] + ['0'])
        out.append('extern "C" const int simt_args_%s[] = {%s};' % (name, sizes))
        out.append('extern "C" void simt_launch_%s(const unsigned *d, unsigned shmem, void **p) {' % name)
        out.append('\tsimt::launch(dim3(d[0], d[1], d[2]), dim3(d[3], d[4], d[5]), shmem, [&] { %s(%s); });' % (name, args))
        out.append('}')
    return '\n'.join(out) + '\n'


def rewrite(src):
    src = src.replace('extern "C" ', '')
    src = re.sub(r'extern __shared__ (?:__align__\(\d+\) )?([\w ]*\w) (\w+)\[\];', r'\1 *\2 = SIMT_DYN(\1);', src)
    for fn in EMULATED:
        src = drop(src, fn)
    for pat, rep in CVT.items():
        src = re.sub(pat, rep, src)
    return src


def main():
    if sys.argv[1] == '--module':
        out, path = sys.argv[2:4]
        src = open(path).read()
        open(out, 'w').write(rewrite(src) + trampolines(src))
        return
    out, common, kernel, name = sys.argv[1:5]
    src = open(common).read() + '\n#line 1 "%s"\n' % name + open(kernel).read()
    open(out, 'w').write(rewrite(src))


main()
