// STAND-IN CANN (test double): libascendcl.so. Device memory is host RAM,
// each stream is an ordered queue run by its own thread, and queued work
// runs only once someone waits for it (a stream or event sync, or a
// stream waiting on an event): so an op's effects are invisible to the
// host before a sync, as on a device. See standin.h for the error rules.
//
// Environment: STANDIN_DEVICES (default 2), STANDIN_HBM_BYTES (device
// memory per device, default 256 MiB), STANDIN_SOC (aclrtGetSocName,
// default Ascend910B3).
#define _GNU_SOURCE
#include "standin.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CTX_MAGIC 0xc0c0c0c0u
#define STREAM_MAGIC 0x5e5e5e5eu
#define EVENT_MAGIC 0xe7e7e7e7u

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_init;
static char g_violation[2048];

static __thread char t_err[2048];
static __thread char t_err_out[2048];

typedef struct ctx {
	uint32_t magic;
	int device, is_default;
} ctx;
static __thread ctx *t_ctx;

#define MAX_DEV 16
static ctx *g_default[MAX_DEV];
static int g_setcount[MAX_DEV];
static size_t g_used[MAX_DEV];

typedef struct alloc {
	char *p;
	size_t n;
	int device;
	struct alloc *next;
} alloc;
static alloc *g_allocs;

static int env_int(const char *name, long long def, long long *out) {
	const char *v = getenv(name);
	*out = v && *v ? atoll(v) : def;
	return 0;
}
static int ndevices(void) {
	long long n;
	env_int("STANDIN_DEVICES", 2, &n);
	return n < 1 ? 1 : n > MAX_DEV ? MAX_DEV : (int)n;
}
static size_t hbm_total(void) {
	long long n;
	env_int("STANDIN_HBM_BYTES", 256ll << 20, &n);
	return (size_t)n;
}

static void set_err(const char *fmt, va_list ap) { vsnprintf(t_err, sizeof t_err, fmt, ap); }
static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	set_err(fmt, ap);
	va_end(ap);
	return code;
}

STANDIN_EXPORT int standin_violation(int code, const char *rule, const char *fmt, ...) {
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	snprintf(t_err, sizeof t_err, "stand-in: rule %s: %s (error %d)", rule, msg, code);
	pthread_mutex_lock(&g_mu);
	snprintf(g_violation, sizeof g_violation, "%s", t_err);
	pthread_mutex_unlock(&g_mu);
	return code;
}

STANDIN_EXPORT const char *standinLastViolation(void) {
	static __thread char out[2048];
	pthread_mutex_lock(&g_mu);
	snprintf(out, sizeof out, "%s", g_violation);
	pthread_mutex_unlock(&g_mu);
	return out;
}

STANDIN_EXPORT void standinClearViolation(void) {
	pthread_mutex_lock(&g_mu);
	g_violation[0] = '\0';
	pthread_mutex_unlock(&g_mu);
}

STANDIN_EXPORT void *standin_current_ctx(void) { return t_ctx; }

STANDIN_EXPORT void standin_set_error(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	set_err(fmt, ap);
	va_end(ap);
}

const char *aclGetRecentErrMsg(void) {
	if (t_err[0] == '\0') {
		return NULL;
	}
	snprintf(t_err_out, sizeof t_err_out, "%s", t_err);
	t_err[0] = '\0';
	return t_err_out;
}

#define NEED_INIT()                                                                                    \
	if (!g_init)                                                                                   \
	return standin_violation(ACL_ERROR_UNINITIALIZE, "init-first", "%s called before aclInit", __func__)
#define NEED_CTX()                                                                                     \
	if (t_ctx == NULL)                                                                             \
	return standin_violation(ACL_ERROR_RT_CONTEXT_NULL, "context-on-thread",                       \
				 "%s on a thread without a current context (aclrtSetDevice or "         \
				 "aclrtSetCurrentContext first)", __func__)

int aclInit(const char *config) {
	(void)config;
	pthread_mutex_lock(&g_mu);
	int again = g_init++;
	pthread_mutex_unlock(&g_mu);
	return again ? ACL_ERROR_REPEAT_INITIALIZE : 0;
}

int aclFinalize(void) {
	NEED_INIT();
	g_init = 0;
	return 0;
}

int aclrtGetDeviceCount(uint32_t *count) {
	NEED_INIT();
	if (count == NULL) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "non-null-out", "aclrtGetDeviceCount(NULL)");
	}
	*count = (uint32_t)ndevices();
	return 0;
}

int aclrtSetDevice(int32_t dev) {
	NEED_INIT();
	if (dev < 0 || dev >= ndevices()) {
		return standin_violation(ACL_ERROR_RT_INVALID_DEVICEID, "device-id", "aclrtSetDevice(%d) of %d devices", dev, ndevices());
	}
	pthread_mutex_lock(&g_mu);
	if (g_default[dev] == NULL) {
		g_default[dev] = calloc(1, sizeof(ctx));
		g_default[dev]->magic = CTX_MAGIC;
		g_default[dev]->device = dev;
		g_default[dev]->is_default = 1;
	}
	g_setcount[dev]++;
	t_ctx = g_default[dev];
	pthread_mutex_unlock(&g_mu);
	return 0;
}

int aclrtResetDevice(int32_t dev) {
	NEED_INIT();
	if (dev < 0 || dev >= ndevices() || g_setcount[dev] == 0) {
		return standin_violation(ACL_ERROR_RT_INVALID_DEVICEID, "reset-set-device", "aclrtResetDevice(%d) without aclrtSetDevice", dev);
	}
	pthread_mutex_lock(&g_mu);
	g_setcount[dev]--;
	pthread_mutex_unlock(&g_mu);
	if (t_ctx != NULL && t_ctx->device == dev) {
		t_ctx = NULL;
	}
	return 0;
}

static int ctx_ok(ctx *c) { return c != NULL && c->magic == CTX_MAGIC; }

int aclrtCreateContext(void **out, int32_t dev) {
	NEED_INIT();
	if (dev < 0 || dev >= ndevices()) {
		return standin_violation(ACL_ERROR_RT_INVALID_DEVICEID, "device-id", "aclrtCreateContext on device %d of %d", dev, ndevices());
	}
	ctx *c = calloc(1, sizeof(ctx));
	c->magic = CTX_MAGIC;
	c->device = dev;
	t_ctx = c;
	*out = c;
	return 0;
}

int aclrtDestroyContext(void *p) {
	ctx *c = p;
	if (!ctx_ok(c)) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "live-context", "aclrtDestroyContext of %p, not a live context", p);
	}
	if (c->is_default) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "keep-default-context", "the default context of device %d must not be destroyed", c->device);
	}
	if (t_ctx == c) {
		t_ctx = NULL;
	}
	c->magic = 0;
	free(c);
	return 0;
}

int aclrtSetCurrentContext(void *p) {
	if (!ctx_ok(p)) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "live-context", "aclrtSetCurrentContext(%p), not a live context", p);
	}
	t_ctx = p;
	return 0;
}

int aclrtGetCurrentContext(void **out) {
	NEED_CTX();
	*out = t_ctx;
	return 0;
}

// ---- memory ----

// find_alloc is the live allocation holding [p, p+n), moved to the front of
// the list (with g_mu held) so that the few buffers an op touches are found
// at once when it is checked again.
static alloc *find_alloc(const void *p, size_t n) {
	for (alloc **pa = &g_allocs; *pa != NULL; pa = &(*pa)->next) {
		alloc *a = *pa;
		if ((const char *)p >= a->p && (const char *)p + n <= a->p + a->n) {
			*pa = a->next;
			a->next = g_allocs;
			g_allocs = a;
			return a;
		}
	}
	return NULL;
}

STANDIN_EXPORT int standin_dev_range(const void *p, size_t n) {
	pthread_mutex_lock(&g_mu);
	int ok = p != NULL && find_alloc(p, n) != NULL;
	pthread_mutex_unlock(&g_mu);
	return ok;
}

int aclrtMalloc(void **out, size_t size, int policy) {
	NEED_INIT();
	NEED_CTX();
	if (out == NULL || size == 0) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "malloc-args", "aclrtMalloc(%p, %zu): size must be > 0", (void *)out, size);
	}
	if (policy < 0 || policy > 7) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "malloc-policy", "aclrtMalloc policy %d", policy);
	}
	// A2/A3: rounded up to 32 bytes plus 32; start 64-byte aligned.
	size_t n = (size + 31) / 32 * 32 + 32;
	int dev = t_ctx->device;
	pthread_mutex_lock(&g_mu);
	if (g_used[dev] + n > hbm_total()) {
		size_t freeb = hbm_total() - g_used[dev];
		pthread_mutex_unlock(&g_mu);
		return fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "EL0004: Failed to allocate memory. %zu bytes requested, %zu free on device %d", size, freeb, dev);
	}
	char *p = aligned_alloc(64, (n + 63) / 64 * 64);
	if (p == NULL) {
		pthread_mutex_unlock(&g_mu);
		return fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "host out of memory");
	}
	memset(p, 0xa5, n); // device memory is not zeroed
	alloc *a = malloc(sizeof *a);
	*a = (alloc){p, n, dev, g_allocs};
	g_allocs = a;
	g_used[dev] += n;
	pthread_mutex_unlock(&g_mu);
	*out = p;
	return 0;
}

int aclrtFree(void *p) {
	NEED_INIT();
	pthread_mutex_lock(&g_mu);
	for (alloc **pa = &g_allocs; *pa != NULL; pa = &(*pa)->next) {
		if ((*pa)->p == p) {
			alloc *a = *pa;
			*pa = a->next;
			g_used[a->device] -= a->n;
			pthread_mutex_unlock(&g_mu);
			memset(a->p, 0xdd, a->n);
			free(a->p);
			free(a);
			return 0;
		}
	}
	pthread_mutex_unlock(&g_mu);
	return standin_violation(ACL_ERROR_INVALID_PARAM, "free-live-allocation", "aclrtFree(%p): not the start of a live aclrtMalloc allocation", p);
}

int aclrtMallocHost(void **out, size_t size) {
	NEED_INIT();
	*out = malloc(size ? size : 1);
	return 0;
}

int aclrtFreeHost(void *p) {
	free(p);
	return 0;
}

int aclrtGetMemInfo(int attr, size_t *freeb, size_t *total) {
	NEED_INIT();
	NEED_CTX();
	if (attr < 0 || attr > 11 || freeb == NULL || total == NULL) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "meminfo-args", "aclrtGetMemInfo(attr %d)", attr);
	}
	pthread_mutex_lock(&g_mu);
	*total = hbm_total();
	*freeb = hbm_total() - g_used[t_ctx->device];
	pthread_mutex_unlock(&g_mu);
	return 0;
}

const char *aclrtGetSocName(void) {
	const char *s = getenv("STANDIN_SOC");
	return s && *s ? s : "Ascend910B3";
}

// aclsysGetVersionStr: STANDIN_CANN_VERSION (default "8.5.0-standin") for
// the packages torch_npu asks about; an unknown package is an error.
int aclsysGetVersionStr(char *pkgName, char *versionStr) {
	if (pkgName == NULL || versionStr == NULL) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "version-args", "aclsysGetVersionStr(NULL)");
	}
	static const char *pkgs[] = {"runtime", "hccl", "hcomm", "opbase", "ops_nn", "ops_transformer", "ops_math", "ge-executor"};
	for (size_t i = 0; i < sizeof pkgs / sizeof *pkgs; i++) {
		if (strcmp(pkgName, pkgs[i]) == 0) {
			const char *v = getenv("STANDIN_CANN_VERSION");
			snprintf(versionStr, 128, "%s", v && *v ? v : "8.5.0-standin");
			return 0;
		}
	}
	return standin_violation(ACL_ERROR_INVALID_PARAM, "version-package", "aclsysGetVersionStr: no package %s", pkgName);
}

int aclrtGetVersion(int32_t *major, int32_t *minor, int32_t *patch) {
	if (major == NULL || minor == NULL || patch == NULL) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "version-args", "aclrtGetVersion(NULL)");
	}
	*major = 1, *minor = 17, *patch = 0;
	return 0;
}

// check_copy validates a copy of count bytes of kind (aclrtMemcpyKind).
static int check_copy(const char *who, void *dst, size_t dmax, const void *src, size_t count, int kind) {
	if (count > dmax) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "copy-fits", "%s: count %zu > destMax %zu", who, count, dmax);
	}
	int ddev = standin_dev_range(dst, count), sdev = standin_dev_range(src, count);
	int want_d = kind == 1 || kind == 3, want_s = kind == 2 || kind == 3;
	if (kind < 1 || kind > 3) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "copy-kind", "%s: kind %d not supported by the stand-in", who, kind);
	}
	if (ddev != want_d || sdev != want_s) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "copy-kind-matches-memory",
					 "%s kind %d: destination %s device memory, source %s device memory (count %zu)", who, kind,
					 ddev ? "is" : "is not", sdev ? "is" : "is not", count);
	}
	return 0;
}

static int capture_unsafe_check(const char *who);

int aclrtMemcpy(void *dst, size_t dmax, const void *src, size_t count, int kind) {
	NEED_INIT();
	NEED_CTX();
	int rc = capture_unsafe_check("aclrtMemcpy");
	if (rc) {
		return rc;
	}
	rc = check_copy("aclrtMemcpy", dst, dmax, src, count, kind);
	if (rc == 0) {
		memcpy(dst, src, count);
	}
	return rc;
}

int aclrtMemset(void *p, size_t max, int32_t value, size_t count) {
	NEED_INIT();
	NEED_CTX();
	int rc = capture_unsafe_check("aclrtMemset");
	if (rc) {
		return rc;
	}
	if (count > max || !standin_dev_range(p, count)) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "memset-device-range", "aclrtMemset(%p, max %zu, count %zu)", p, max, count);
	}
	memset(p, value, count);
	return 0;
}

// ---- streams ----

typedef struct task {
	int (*fn)(void *);
	void *arg;
	void (*done)(void *);
	uint64_t seq;
	struct task *next;
} task;

typedef struct stream {
	uint32_t magic;
	ctx *owner;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	task *head, *tail;
	uint64_t enq, released, executed;
	int stop;
	int err;
	char errmsg[1024];
	struct capture *cap; // non-NULL between aclmdlRICaptureBegin and End
	uint64_t aborts;     // aclrtStreamAbort calls (standin_stream_aborts)
} stream;

static __thread stream *t_running; // the stream whose task this thread runs

STANDIN_EXPORT void standin_stream_fail(const char *rule, const char *msg) {
	stream *s = t_running;
	if (s != NULL && s->err == 0) {
		s->err = ACL_ERROR_RT_AICORE_EXCEPTION;
		snprintf(s->errmsg, sizeof s->errmsg, "stand-in: rule %s: %s (error %d)", rule, msg, ACL_ERROR_RT_AICORE_EXCEPTION);
		pthread_mutex_lock(&g_mu);
		snprintf(g_violation, sizeof g_violation, "%s", s->errmsg);
		pthread_mutex_unlock(&g_mu);
	}
}

static void *stream_main(void *p) {
	stream *s = p;
	t_running = s;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->stop && (s->head == NULL || s->head->seq > s->released)) {
			pthread_cond_wait(&s->cv, &s->mu);
		}
		if (s->head == NULL && s->stop) {
			break;
		}
		if (s->head == NULL || s->head->seq > s->released) {
			continue;
		}
		task *t = s->head;
		s->head = t->next;
		if (s->head == NULL) {
			s->tail = NULL;
		}
		int skip = s->err != 0;
		pthread_mutex_unlock(&s->mu);
		if (!skip && t->fn != NULL) {
			int rc = t->fn(t->arg);
			if (rc != 0 && s->err == 0) {
				s->err = rc;
				snprintf(s->errmsg, sizeof s->errmsg, "stand-in: a task failed with %d", rc);
			}
		}
		if (t->done != NULL) {
			t->done(t->arg);
		}
		pthread_mutex_lock(&s->mu);
		s->executed = t->seq;
		free(t);
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static int stream_live(stream *s) { return s != NULL && s->magic == STREAM_MAGIC; }

STANDIN_EXPORT int standin_stream_ok(void *p, const char *who) {
	stream *s = p;
	if (t_ctx == NULL) {
		return standin_violation(ACL_ERROR_RT_CONTEXT_NULL, "context-on-thread", "%s on a thread without a current context", who);
	}
	if (p == NULL) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "explicit-stream", "%s on the default (NULL) stream: the stand-in wants the backend's own stream", who);
	}
	if (!stream_live(s)) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "live-stream", "%s on %p, not a live stream", who, p);
	}
	if (s->owner->device != t_ctx->device) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "stream-of-current-context",
					 "%s: stream of device %d used from a thread whose context is on device %d", who, s->owner->device, t_ctx->device);
	}
	return 0;
}

static int capture_record(stream *s, int (*fn)(void *), void *arg, void (*done)(void *));

STANDIN_EXPORT int standin_enqueue(void *p, int (*fn)(void *), void *arg, void (*done)(void *)) {
	stream *s = p;
	pthread_mutex_lock(&s->mu);
	int capturing = s->cap != NULL;
	pthread_mutex_unlock(&s->mu);
	if (capturing) {
		return capture_record(s, fn, arg, done);
	}
	task *t = calloc(1, sizeof *t);
	t->fn = fn;
	t->arg = arg;
	t->done = done;
	pthread_mutex_lock(&s->mu);
	t->seq = ++s->enq;
	if (s->tail) {
		s->tail->next = t;
	} else {
		s->head = t;
	}
	s->tail = t;
	pthread_mutex_unlock(&s->mu);
	return 0;
}

int aclrtCreateStream(void **out) {
	NEED_INIT();
	NEED_CTX();
	stream *s = calloc(1, sizeof *s);
	s->magic = STREAM_MAGIC;
	s->owner = t_ctx;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	pthread_create(&s->th, NULL, stream_main, s);
	*out = s;
	return 0;
}

// wait_upto releases the stream's work up to seq and waits for it (ms < 0:
// for ever). It reports (and clears) the stream's failure.
static int wait_upto(stream *s, uint64_t seq, int32_t ms) {
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	if (ms > 0) {
		dl.tv_sec += ms / 1000;
		dl.tv_nsec += (long)(ms % 1000) * 1000000;
		if (dl.tv_nsec >= 1000000000) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000;
		}
	}
	pthread_mutex_lock(&s->mu);
	if (seq > s->released) {
		s->released = seq;
		pthread_cond_broadcast(&s->cv);
	}
	while (s->executed < seq) {
		if (ms < 0) {
			pthread_cond_wait(&s->cv, &s->mu);
		} else if (ms == 0 || pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT) {
			if (s->executed < seq) {
				pthread_mutex_unlock(&s->mu);
				return fail(ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, "stream synchronize timed out after %d ms", ms);
			}
		}
	}
	int err = s->err;
	if (err) {
		snprintf(t_err, sizeof t_err, "%s", s->errmsg);
		s->err = 0;
	}
	pthread_mutex_unlock(&s->mu);
	return err;
}

static int capture_sync_check(stream *s, const char *who);

int aclrtSynchronizeStreamWithTimeout(void *p, int32_t ms) {
	NEED_INIT();
	int rc = standin_stream_ok(p, "aclrtSynchronizeStream");
	if (rc == 0) {
		rc = capture_sync_check(p, "aclrtSynchronizeStream");
	}
	if (rc) {
		return rc;
	}
	stream *s = p;
	pthread_mutex_lock(&s->mu);
	uint64_t seq = s->enq;
	pthread_mutex_unlock(&s->mu);
	return wait_upto(s, seq, ms);
}

int aclrtSynchronizeStream(void *p) { return aclrtSynchronizeStreamWithTimeout(p, -1); }

int aclrtStreamAbort(void *p) {
	stream *s = p;
	if (!stream_live(s)) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "live-stream", "aclrtStreamAbort(%p)", p);
	}
	pthread_mutex_lock(&s->mu);
	for (task *t = s->head; t != NULL; t = t->next) {
		t->fn = NULL;
	}
	s->released = s->enq;
	s->aborts++;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

STANDIN_EXPORT uint64_t standin_stream_aborts(void *p) {
	stream *s = p;
	pthread_mutex_lock(&s->mu);
	uint64_t n = s->aborts;
	pthread_mutex_unlock(&s->mu);
	return n;
}

int aclrtDestroyStream(void *p) {
	NEED_INIT();
	stream *s = p;
	if (!stream_live(s)) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "live-stream", "aclrtDestroyStream(%p)", p);
	}
	if (s->cap != NULL) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "end-capture-before-destroy", "aclrtDestroyStream of a capturing stream (aclmdlRICaptureEnd first)");
	}
	pthread_mutex_lock(&s->mu);
	int busy = s->executed < s->enq;
	if (!busy) {
		s->stop = 1;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	if (busy) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "sync-before-destroy", "aclrtDestroyStream with %llu unfinished tasks: synchronize it first",
					 (unsigned long long)(s->enq - s->executed));
	}
	pthread_join(s->th, NULL);
	s->magic = 0;
	free(s);
	return 0;
}

typedef struct {
	void *dst;
	const void *src;
	size_t n;
	int set, value;
} copy_task;

static int run_copy(void *p) {
	copy_task *c = p;
	if (c->set) {
		memset(c->dst, c->value, c->n);
	} else {
		memcpy(c->dst, c->src, c->n);
	}
	return 0;
}

int aclrtMemcpyAsync(void *dst, size_t dmax, const void *src, size_t count, int kind, void *stream) {
	NEED_INIT();
	int rc = standin_stream_ok(stream, "aclrtMemcpyAsync");
	if (rc == 0) {
		rc = check_copy("aclrtMemcpyAsync", dst, dmax, src, count, kind);
	}
	if (rc) {
		return rc;
	}
	copy_task *c = calloc(1, sizeof *c);
	*c = (copy_task){dst, src, count, 0, 0};
	return standin_enqueue(stream, run_copy, c, free);
}

int aclrtMemsetAsync(void *p, size_t max, int32_t value, size_t count, void *stream) {
	NEED_INIT();
	int rc = standin_stream_ok(stream, "aclrtMemsetAsync");
	if (rc) {
		return rc;
	}
	if (count > max || !standin_dev_range(p, count)) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "memset-device-range", "aclrtMemsetAsync(%p, max %zu, count %zu)", p, max, count);
	}
	copy_task *c = calloc(1, sizeof *c);
	*c = (copy_task){p, NULL, count, 1, value};
	return standin_enqueue(stream, run_copy, c, free);
}

// ---- events ----

typedef struct event {
	uint32_t magic;
	stream *s;
	uint64_t seq;
} event;

int aclrtCreateEvent(void **out) {
	NEED_INIT();
	NEED_CTX();
	event *e = calloc(1, sizeof *e);
	e->magic = EVENT_MAGIC;
	*out = e;
	return 0;
}

int aclrtDestroyEvent(void *p) {
	event *e = p;
	if (e == NULL || e->magic != EVENT_MAGIC) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "live-event", "aclrtDestroyEvent(%p)", p);
	}
	e->magic = 0;
	free(e);
	return 0;
}

int aclrtRecordEvent(void *p, void *st) {
	event *e = p;
	int rc = standin_stream_ok(st, "aclrtRecordEvent");
	if (rc) {
		return rc;
	}
	if (e == NULL || e->magic != EVENT_MAGIC) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "live-event", "aclrtRecordEvent(%p)", p);
	}
	if (((stream *)st)->cap != NULL) {
		return standin_violation(ACL_ERROR_RT_PARAM_INVALID, "standin-no-events-in-capture",
					 "aclrtRecordEvent on a capturing stream: the stand-in does not model events inside a graph");
	}
	standin_enqueue(st, NULL, NULL, NULL);
	stream *s = st;
	pthread_mutex_lock(&s->mu);
	e->s = s;
	e->seq = s->enq;
	pthread_mutex_unlock(&s->mu);
	return 0;
}

int aclrtSynchronizeEvent(void *p) {
	event *e = p;
	if (e == NULL || e->magic != EVENT_MAGIC) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "live-event", "aclrtSynchronizeEvent(%p)", p);
	}
	int rc = capture_sync_check(e->s, "aclrtSynchronizeEvent");
	if (rc) {
		return rc;
	}
	if (e->s == NULL) {
		return 0; // never recorded: complete
	}
	return wait_upto(e->s, e->seq, -1);
}

typedef struct {
	event e;
} wait_task;

static int run_wait(void *p) {
	wait_task *w = p;
	return wait_upto(w->e.s, w->e.seq, -1);
}

int aclrtStreamWaitEvent(void *st, void *p) {
	event *e = p;
	int rc = standin_stream_ok(st, "aclrtStreamWaitEvent");
	if (rc) {
		return rc;
	}
	if (e == NULL || e->magic != EVENT_MAGIC) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "live-event", "aclrtStreamWaitEvent(%p)", p);
	}
	if (e->s == NULL) {
		return 0;
	}
	wait_task *w = malloc(sizeof *w);
	w->e = *e;
	return standin_enqueue(st, run_wait, w, free);
}

// ---- graph capture (aclmdlRI), ascend-api.md §5 ----
//
// Between aclmdlRICaptureBegin and aclmdlRICaptureEnd the work enqueued on
// the stream (copies, memsets, aclnn phase 2) is recorded into the model,
// not run; aclmdlRIExecuteAsync enqueues the recorded tasks again, in
// order, on a stream: they use the addresses they were given and read the
// memory's contents when they run. The recorded arguments belong to the
// model until aclmdlRIDestroy. Rules (the codes are those ascend-api.md
// §5 lists; which of 107027/107029 is which is not stated there, so the
// stand-in uses 107027 for the refused call and 107029 for ending an
// invalidated capture):
//   - no stream or event synchronisation during a capture, in any mode:
//     neither of the capturing stream (from any thread) nor of any stream
//     or event from the capturing thread; the call fails and invalidates
//     the capture (its End then fails);
//   - the sync memory calls (aclrtMemcpy, aclrtMemset) are refused while a
//     GLOBAL capture runs anywhere, or a THREAD_LOCAL one on this thread;
//     RELAXED allows them;
//   - begin and end on the same thread, with a current context of the
//     stream's device; captures do not nest on a stream, and a thread
//     captures one stream at a time;
//   - a model is destroyed only once its queued replays have run.
// aclnn's single-use executors (nnopbase.c) are consumed by the first run
// of the recorded phase 2, so a model holding one fails its second replay:
// the stand-in's strict reading of "single use unless repeatable".

#define ACL_ERROR_RT_CAPTURE_SYNC 107027
#define ACL_ERROR_RT_CAPTURE_INVALIDATED 107029
#define ACL_ERROR_RT_CAPTURE_MODE 107030
#define ACL_ERROR_RT_CAPTURE_WRONG_THREAD 107038
#define MODEL_MAGIC 0x3d3d3d3du

enum { CAPTURE_GLOBAL = 0, CAPTURE_THREAD_LOCAL = 1, CAPTURE_RELAXED = 2 };
enum { CAPTURE_STATUS_NONE = 0, CAPTURE_STATUS_ACTIVE = 1, CAPTURE_STATUS_INVALIDATED = 2 };

typedef struct rtask {
	int (*fn)(void *);
	void *arg;
	void (*done)(void *);
} rtask;

typedef struct model {
	uint32_t magic;
	int device;
	rtask *tasks;
	size_t n, capn;
	int inflight; // replay tasks queued and not yet run (g_mu)
} model;

typedef struct capture {
	int mode;
	pthread_t thread;
	stream *s;
	int invalid;
	char why[1024];
	model *m;
	struct capture *next; // in g_captures
} capture;

static capture *g_captures;         // every capture in progress (g_mu)
static __thread capture *t_capture; // the capture this thread began

static void invalidate(capture *c, const char *why) {
	if (!c->invalid) {
		c->invalid = 1;
		snprintf(c->why, sizeof c->why, "%s", why);
	}
}

static int capture_record(stream *s, int (*fn)(void *), void *arg, void (*done)(void *)) {
	pthread_mutex_lock(&s->mu);
	model *m = s->cap->m;
	if (m->n == m->capn) {
		m->capn = m->capn ? 2 * m->capn : 16;
		m->tasks = realloc(m->tasks, m->capn * sizeof *m->tasks);
	}
	m->tasks[m->n++] = (rtask){fn, arg, done};
	pthread_mutex_unlock(&s->mu);
	return 0;
}

static int capture_sync_check(stream *s, const char *who) {
	capture *c = NULL;
	if (s != NULL) {
		pthread_mutex_lock(&s->mu);
		c = s->cap;
		pthread_mutex_unlock(&s->mu);
	}
	if (c == NULL) {
		c = t_capture;
	}
	if (c == NULL) {
		return 0;
	}
	int rc = standin_violation(ACL_ERROR_RT_CAPTURE_SYNC, "no-sync-in-capture",
				   "%s during a graph capture: no stream, event, context or device may be synchronised or queried while capturing", who);
	pthread_mutex_lock(&g_mu);
	invalidate(c, t_err);
	pthread_mutex_unlock(&g_mu);
	return rc;
}

static int capture_unsafe_check(const char *who) {
	pthread_mutex_lock(&g_mu);
	capture *bad = NULL;
	for (capture *c = g_captures; c != NULL && bad == NULL; c = c->next) {
		if (c->mode == CAPTURE_GLOBAL || (c->mode == CAPTURE_THREAD_LOCAL && c == t_capture)) {
			bad = c;
		}
	}
	pthread_mutex_unlock(&g_mu);
	if (bad == NULL) {
		return 0;
	}
	int rc = standin_violation(ACL_ERROR_RT_CAPTURE_MODE, "capture-mode-unsafe-call",
				   "%s while a %s capture runs: synchronous memory calls are refused in GLOBAL mode (every thread) and THREAD_LOCAL mode "
				   "(the capturing thread); switch this thread to RELAXED with aclmdlRICaptureThreadExchangeMode",
				   who, bad->mode == CAPTURE_GLOBAL ? "GLOBAL" : "THREAD_LOCAL");
	pthread_mutex_lock(&g_mu);
	invalidate(bad, t_err);
	pthread_mutex_unlock(&g_mu);
	return rc;
}

int aclmdlRICaptureBegin(void *st, int mode) {
	NEED_INIT();
	int rc = standin_stream_ok(st, "aclmdlRICaptureBegin");
	if (rc) {
		return rc;
	}
	if (mode < CAPTURE_GLOBAL || mode > CAPTURE_RELAXED) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "capture-mode", "aclmdlRICaptureBegin mode %d", mode);
	}
	stream *s = st;
	if (s->cap != NULL) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "capture-not-nested", "aclmdlRICaptureBegin on a stream that is already capturing");
	}
	if (t_capture != NULL) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "capture-one-stream-per-thread", "aclmdlRICaptureBegin while this thread captures another stream");
	}
	capture *c = calloc(1, sizeof *c);
	c->mode = mode;
	c->thread = pthread_self();
	c->s = s;
	c->m = calloc(1, sizeof *c->m);
	c->m->magic = MODEL_MAGIC;
	c->m->device = s->owner->device;
	pthread_mutex_lock(&g_mu);
	c->next = g_captures;
	g_captures = c;
	pthread_mutex_unlock(&g_mu);
	pthread_mutex_lock(&s->mu);
	s->cap = c;
	pthread_mutex_unlock(&s->mu);
	t_capture = c;
	return 0;
}

int aclmdlRICaptureGetInfo(void *st, int *status, void **out) {
	NEED_INIT();
	int rc = standin_stream_ok(st, "aclmdlRICaptureGetInfo");
	if (rc) {
		return rc;
	}
	if (status == NULL) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "non-null-out", "aclmdlRICaptureGetInfo(status NULL)");
	}
	stream *s = st;
	pthread_mutex_lock(&g_mu);
	capture *c = s->cap;
	*status = c == NULL ? CAPTURE_STATUS_NONE : c->invalid ? CAPTURE_STATUS_INVALIDATED : CAPTURE_STATUS_ACTIVE;
	if (out != NULL) {
		*out = c == NULL ? NULL : c->m;
	}
	pthread_mutex_unlock(&g_mu);
	return 0;
}

static void model_free(model *m) {
	for (size_t i = 0; i < m->n; i++) {
		if (m->tasks[i].done != NULL) {
			m->tasks[i].done(m->tasks[i].arg);
		}
	}
	free(m->tasks);
	m->magic = 0;
	free(m);
}

int aclmdlRICaptureEnd(void *st, void **out) {
	NEED_INIT();
	int rc = standin_stream_ok(st, "aclmdlRICaptureEnd");
	if (rc) {
		return rc;
	}
	stream *s = st;
	capture *c = s->cap;
	if (c == NULL) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "capture-begun", "aclmdlRICaptureEnd on a stream that is not capturing");
	}
	if (!pthread_equal(c->thread, pthread_self())) {
		return standin_violation(ACL_ERROR_RT_CAPTURE_WRONG_THREAD, "capture-same-thread",
					 "aclmdlRICaptureEnd on another thread than its aclmdlRICaptureBegin");
	}
	if (out == NULL) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "non-null-out", "aclmdlRICaptureEnd(modelRI NULL)");
	}
	pthread_mutex_lock(&s->mu);
	s->cap = NULL;
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_lock(&g_mu);
	for (capture **pc = &g_captures; *pc != NULL; pc = &(*pc)->next) {
		if (*pc == c) {
			*pc = c->next;
			break;
		}
	}
	pthread_mutex_unlock(&g_mu);
	t_capture = NULL;
	*out = NULL;
	if (c->invalid) {
		model_free(c->m);
		rc = standin_violation(ACL_ERROR_RT_CAPTURE_INVALIDATED, "capture-invalidated", "the capture was invalidated by a refused call: %s", c->why);
		free(c);
		return rc;
	}
	*out = c->m;
	free(c);
	return 0;
}

typedef struct {
	model *m;
	size_t i;
} replay_task;

static int run_replay(void *p) {
	replay_task *r = p;
	rtask *t = &r->m->tasks[r->i];
	return t->fn == NULL ? 0 : t->fn(t->arg);
}

static void replay_done(void *p) {
	replay_task *r = p;
	pthread_mutex_lock(&g_mu);
	r->m->inflight--;
	pthread_mutex_unlock(&g_mu);
	free(r);
}

static int model_live(model *m) { return m != NULL && m->magic == MODEL_MAGIC; }

int aclmdlRIExecuteAsync(void *p, void *st) {
	NEED_INIT();
	int rc = standin_stream_ok(st, "aclmdlRIExecuteAsync");
	if (rc) {
		return rc;
	}
	model *m = p;
	if (!model_live(m)) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "live-model", "aclmdlRIExecuteAsync(%p): not a live model (destroyed?)", p);
	}
	stream *s = st;
	if (s->cap != NULL) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "standin-no-replay-in-capture",
					 "aclmdlRIExecuteAsync on a capturing stream: the stand-in does not model graphs inside graphs");
	}
	if (m->device != s->owner->device) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "model-of-stream-device", "aclmdlRIExecuteAsync: model of device %d on a stream of device %d",
					 m->device, s->owner->device);
	}
	for (size_t i = 0; i < m->n; i++) {
		replay_task *r = malloc(sizeof *r);
		*r = (replay_task){m, i};
		pthread_mutex_lock(&g_mu);
		m->inflight++;
		pthread_mutex_unlock(&g_mu);
		standin_enqueue(s, run_replay, r, replay_done);
	}
	return 0;
}

int aclmdlRIDestroy(void *p) {
	NEED_INIT();
	model *m = p;
	if (!model_live(m)) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "live-model", "aclmdlRIDestroy(%p): not a live model", p);
	}
	pthread_mutex_lock(&g_mu);
	int busy = m->inflight;
	pthread_mutex_unlock(&g_mu);
	if (busy) {
		return standin_violation(ACL_ERROR_INVALID_PARAM, "destroy-after-replays",
					 "aclmdlRIDestroy with %d tasks of its replays still queued: synchronize the stream first (captured resources must stay valid "
					 "until the model is destroyed)", busy);
	}
	model_free(m);
	return 0;
}
