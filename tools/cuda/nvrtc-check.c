// nvrtc-check compiles CUDA kernel files with whatever NVRTC the machine
// has (CUDA 11.8 or later; no GPU needed) to PTX for compute_90: the real
// compiler the backend uses, so a machine without a GPU catches what the
// GPU host would reject. tools/cuda/nvrtc-check.sh builds and runs it.
//   nvrtc-check LIBNVRTC FILE...   (each FILE is common.cuh + one .cu)
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef void *prog_t;
typedef int (*create_t)(prog_t *, const char *, const char *, int, const char *const *, const char *const *);
typedef int (*compile_t)(prog_t, int, const char *const *);
typedef int (*logsize_t)(prog_t, size_t *);
typedef int (*log_t)(prog_t, char *);

static char *slurp(const char *path) {
	FILE *f = fopen(path, "rb");
	if (!f) return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc(n + 1);
	if (fread(buf, 1, n, f) != (size_t)n) { fclose(f); free(buf); return NULL; }
	buf[n] = 0;
	fclose(f);
	return buf;
}

int main(int argc, char **argv) {
	if (argc < 3) { fprintf(stderr, "usage: nvrtc-check LIBNVRTC FILE...\n"); return 2; }
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) { fprintf(stderr, "nvrtc-check: %s\n", dlerror()); return 2; }
	create_t create = (create_t)dlsym(h, "nvrtcCreateProgram");
	compile_t compile = (compile_t)dlsym(h, "nvrtcCompileProgram");
	logsize_t logsize = (logsize_t)dlsym(h, "nvrtcGetProgramLogSize");
	log_t getlog = (log_t)dlsym(h, "nvrtcGetProgramLog");
	if (!create || !compile || !logsize || !getlog) { fprintf(stderr, "nvrtc-check: missing NVRTC symbols\n"); return 2; }
	const char *opts[] = {"--gpu-architecture=compute_90", "--std=c++17", "-DNPUSERVE_CUDA=1"};
	int fail = 0;
	for (int i = 2; i < argc; i++) {
		char *src = slurp(argv[i]);
		if (!src) { fprintf(stderr, "nvrtc-check: cannot read %s\n", argv[i]); return 2; }
		prog_t p = NULL;
		int rc = create(&p, src, argv[i], 0, NULL, NULL);
		if (rc == 0) rc = compile(p, 3, opts);
		size_t n = 0;
		logsize(p, &n);
		char *msg = malloc(n + 1);
		msg[0] = 0;
		if (n > 0) getlog(p, msg);
		printf("%s %s\n", rc == 0 ? "ok  " : "FAIL", argv[i]);
		if (n > 1) printf("%s\n", msg);
		if (rc != 0) fail = 1;
		free(msg);
		free(src);
	}
	return fail;
}
