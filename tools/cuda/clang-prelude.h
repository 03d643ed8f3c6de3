// clang-only stand-in for what NVRTC provides built in (the CUDA device
// runtime: qualifiers, built-in variables, vector types, math, warp
// intrinsics, atomics), so that clang-check.sh can type-check the kernel
// sources on a machine without the CUDA toolkit. Not used by the build.
#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define CUDA_VERSION 12000
#include <stddef.h>
#include <limits.h>
#define HUGE_VAL __builtin_huge_val()
#define HUGE_VALF __builtin_huge_valf()
#include <__clang_cuda_builtin_vars.h>
struct char1 { char x; };
struct __attribute__((aligned(2))) char2 { char x, y; };
struct char3 { char x, y, z; };
struct __attribute__((aligned(4))) char4 { char x, y, z, w; };
struct uchar1 { unsigned char x; };
struct __attribute__((aligned(2))) uchar2 { unsigned char x, y; };
struct uchar3 { unsigned char x, y, z; };
struct __attribute__((aligned(4))) uchar4 { unsigned char x, y, z, w; };
struct short1 { short x; };
struct __attribute__((aligned(4))) short2 { short x, y; };
struct short3 { short x, y, z; };
struct __attribute__((aligned(8))) short4 { short x, y, z, w; };
struct ushort1 { unsigned short x; };
struct __attribute__((aligned(4))) ushort2 { unsigned short x, y; };
struct ushort3 { unsigned short x, y, z; };
struct __attribute__((aligned(8))) ushort4 { unsigned short x, y, z, w; };
struct int1 { int x; };
struct __attribute__((aligned(8))) int2 { int x, y; };
struct int3 { int x, y, z; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct uint1 { unsigned int x; };
struct __attribute__((aligned(8))) uint2 { unsigned int x, y; };
struct uint3 { unsigned int x, y, z; };
struct __attribute__((aligned(16))) uint4 { unsigned int x, y, z, w; };
struct long1 { long x; };
struct __attribute__((aligned(16))) long2 { long x, y; };
struct long3 { long x, y, z; };
struct long4 { long x, y, z, w; };
struct ulong1 { unsigned long x; };
struct __attribute__((aligned(16))) ulong2 { unsigned long x, y; };
struct ulong3 { unsigned long x, y, z; };
struct ulong4 { unsigned long x, y, z, w; };
struct longlong1 { long long x; };
struct __attribute__((aligned(16))) longlong2 { long long x, y; };
struct longlong3 { long long x, y, z; };
struct longlong4 { long long x, y, z, w; };
struct ulonglong1 { unsigned long long x; };
struct __attribute__((aligned(16))) ulonglong2 { unsigned long long x, y; };
struct ulonglong3 { unsigned long long x, y, z; };
struct ulonglong4 { unsigned long long x, y, z, w; };
struct float1 { float x; };
struct __attribute__((aligned(8))) float2 { float x, y; };
struct float3 { float x, y, z; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct double1 { double x; };
struct __attribute__((aligned(16))) double2 { double x, y; };
struct double3 { double x, y, z; };
struct double4 { double x, y, z, w; };
typedef unsigned int cuuint32_t;
#include <__clang_cuda_libdevice_declares.h>
#include <__clang_cuda_device_functions.h>
#include <__clang_cuda_math.h>
#include <__clang_cuda_intrinsics.h>
static __device__ __forceinline__ float atomicAdd(float *p, float v) { return __nvvm_atom_add_gen_f(p, v); }
static __device__ __forceinline__ int atomicAdd(int *p, int v) { return __nvvm_atom_add_gen_i(p, v); }
static __device__ __forceinline__ int atomicMax(int *p, int v) { return __nvvm_atom_max_gen_i(p, v); }
static __device__ __forceinline__ int atomicMin(int *p, int v) { return __nvvm_atom_min_gen_i(p, v); }
static __device__ __forceinline__ int atomicCAS(int *p, int c, int v) { return __nvvm_atom_cas_gen_i(p, c, v); }
static __device__ __forceinline__ int atomicExch(int *p, int v) { return __nvvm_atom_xchg_gen_i(p, v); }
