// A fake CANN for testing the hccl/ascend binding on machines without
// NPUs. Built twice by the tests: -DFAKE_ACL gives libascendcl.so (devices,
// host-memory "device" memory, streams run by worker threads) and
// -DFAKE_HCCL gives libhccl.so (communicators whose ranks are threads of
// one process, collectives with the documented semantics). Signatures
// follow the public CANN API as the binding declares it; nothing here is
// CANN's code. It checks what the binding passes (config struct layout,
// counts, dtypes) and fails the way HCCL does: a collective that some rank
// never joins times out on the stream.
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void deadline_after(struct timespec *ts, double seconds) {
	clock_gettime(CLOCK_REALTIME, ts);
	double ns = ts->tv_nsec + (seconds - (long)seconds) * 1e9;
	ts->tv_sec += (long)seconds + (long)(ns / 1e9);
	ts->tv_nsec = (long)fmod(ns, 1e9);
}

#ifdef FAKE_ACL
// ---------------------------------------------------------------- ACL ----

static __thread int cur_device = -1;
static __thread char err_msg[256];
static int initialized;
static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;

static int fail(int code, const char *msg) {
	snprintf(err_msg, sizeof(err_msg), "EE9999: fake CANN: %s", msg);
	return code;
}

int aclInit(const char *config) {
	(void)config;
	pthread_mutex_lock(&init_mu);
	int again = initialized;
	initialized = 1;
	pthread_mutex_unlock(&init_mu);
	return again ? 100002 : 0;
}

static int device_count(void) {
	const char *s = getenv("FAKECANN_DEVICES");
	return s ? atoi(s) : 8;
}

int aclrtGetDeviceCount(uint32_t *count) {
	*count = (uint32_t)device_count();
	return 0;
}

int aclrtSetDevice(int32_t device) {
	if (!initialized) {
		return fail(100001, "aclInit was not called");
	}
	if (device < 0 || device >= device_count()) {
		return fail(107001, "invalid device id");
	}
	cur_device = device;
	return 0;
}

const char *aclGetRecentErrMsg(void) {
	static __thread char out[256];
	if (err_msg[0] == 0) {
		return NULL;
	}
	memcpy(out, err_msg, sizeof(out));
	err_msg[0] = 0;
	return out;
}

// Streams: a worker thread runs tasks in order.
typedef struct task {
	void (*fn)(void *arg);
	void *arg;
	struct task *next;
} task;

typedef struct {
	pthread_t worker;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	task *head, *tail;
	int pending; // queued + running
	int aborted, shutdown;
	int device;
} stream;

static void *stream_loop(void *p) {
	stream *s = p;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (s->head == NULL && !s->shutdown) {
			pthread_cond_wait(&s->cv, &s->mu);
		}
		if (s->head == NULL) {
			break;
		}
		task *t = s->head;
		s->head = t->next;
		if (s->head == NULL) {
			s->tail = NULL;
		}
		pthread_mutex_unlock(&s->mu);
		t->fn(t->arg);
		free(t);
		pthread_mutex_lock(&s->mu);
		s->pending--;
		if (s->pending == 0) {
			s->aborted = 0;
		}
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int aclrtCreateStream(void **out) {
	if (cur_device < 0) {
		return fail(107002, "the context is empty: aclrtSetDevice was not called on this thread");
	}
	stream *s = calloc(1, sizeof(stream));
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->device = cur_device;
	pthread_create(&s->worker, NULL, stream_loop, s);
	*out = s;
	return 0;
}

int aclrtDestroyStream(void *p) {
	stream *s = p;
	pthread_mutex_lock(&s->mu);
	s->shutdown = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->worker, NULL);
	free(s);
	return 0;
}

// fakecann_enqueue is how the fake HCCL puts work on a stream.
int fakecann_enqueue(void *p, void (*fn)(void *), void *arg) {
	stream *s = p;
	if (s == NULL) {
		return 107000;
	}
	task *t = calloc(1, sizeof(task));
	t->fn = fn;
	t->arg = arg;
	pthread_mutex_lock(&s->mu);
	if (s->tail) {
		s->tail->next = t;
	} else {
		s->head = t;
	}
	s->tail = t;
	s->pending++;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

int fakecann_aborted(void *p) {
	stream *s = p;
	pthread_mutex_lock(&s->mu);
	int a = s->aborted;
	pthread_mutex_unlock(&s->mu);
	return a;
}

int aclrtSynchronizeStreamWithTimeout(void *p, int32_t timeout_ms) {
	stream *s = p;
	struct timespec ts;
	deadline_after(&ts, timeout_ms / 1000.0);
	int rc = 0;
	pthread_mutex_lock(&s->mu);
	while (s->pending > 0 && rc != ETIMEDOUT) {
		if (timeout_ms < 0) {
			pthread_cond_wait(&s->cv, &s->mu);
		} else {
			rc = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
		}
	}
	int busy = s->pending > 0;
	pthread_mutex_unlock(&s->mu);
	return busy ? fail(507046, "stream synchronize timeout") : 0;
}

int aclrtSynchronizeStream(void *p) { return aclrtSynchronizeStreamWithTimeout(p, -1); }

int aclrtStreamAbort(void *p) {
	stream *s = p;
	pthread_mutex_lock(&s->mu);
	s->aborted = 1;
	// Drop what has not started; the running task sees the flag.
	task *t = s->head;
	if (t != NULL) {
		t = t->next; // the head may be running or about to
		s->head->next = NULL;
		s->tail = s->head;
	}
	while (t != NULL) {
		task *n = t->next;
		free(t->arg);
		free(t);
		s->pending--;
		t = n;
	}
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

int aclrtMalloc(void **p, size_t size, int policy) {
	(void)policy;
	if (cur_device < 0) {
		return fail(107002, "the context is empty");
	}
	if (posix_memalign(p, 64, size ? size : 1) != 0) {
		return fail(207001, "out of memory");
	}
	return 0;
}

int aclrtFree(void *p) {
	free(p);
	return 0;
}

int aclrtMemcpy(void *dst, size_t dst_max, const void *src, size_t count, int kind) {
	if (count > dst_max) {
		return fail(100000, "memcpy count exceeds destMax");
	}
	if (kind != 1 && kind != 2) {
		return fail(100000, "unexpected memcpy kind");
	}
	memcpy(dst, src, count);
	return 0;
}

int aclrtMemset(void *p, size_t max, int32_t value, size_t count) {
	if (count > max) {
		return fail(100000, "memset count exceeds max");
	}
	memset(p, value, count);
	return 0;
}
#endif // FAKE_ACL

#ifdef FAKE_HCCL
// --------------------------------------------------------------- HCCL ----

int fakecann_enqueue(void *stream, void (*fn)(void *), void *arg);
int fakecann_aborted(void *stream);

enum { E_PARA = 1, E_PTR = 2, E_INTERNAL = 4, E_NOT_SUPPORT = 5, E_TIMEOUT = 9 };
enum { K_ALLREDUCE, K_BROADCAST, K_REDUCESCATTER, K_ALLGATHER, K_ALLTOALL, K_ALLTOALLV, K_BARRIER, K_SEND, K_RECV };

#include "hccl_common.h" // npu/ascend/testdata/standin: esize, store, reduce, config, ...

#define ROOT_BYTES 4108
#define MAXR 16


typedef struct desc {
	int kind, dtype, op;
	uint64_t count; // elements: AllReduce/Broadcast count, RS recv count, AG/A2A send count
	uint32_t root, peer;
	const void *send;
	void *recv;
	uint64_t counts[4 * MAXR]; // A2AV: scounts, sdispls, rcounts, rdispls
	void *snapshot;
	struct comm *comm;
	void *stream;
} desc;

typedef struct group {
	uint64_t id;
	int n, joined, alive;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	// the collective in progress
	desc *slot[MAXR];
	int arrived, departed;
	uint64_t gen;
	int broken;
	// point-to-point mailboxes [src][dst]
	desc *mail[MAXR][MAXR];
	struct group *next;
} group;

typedef struct comm {
	group *g;
	int rank;
	double timeout; // seconds
	int async_err;
} comm;

static pthread_mutex_t groups_mu = PTHREAD_MUTEX_INITIALIZER;
static group *groups;
static uint64_t next_id = 1;

int HcclGetRootInfo(char *info) {
	memset(info, 0, ROOT_BYTES);
	memcpy(info, "FAKECANN", 8);
	pthread_mutex_lock(&groups_mu);
	uint64_t id = ((uint64_t)getpid() << 32) | next_id++;
	pthread_mutex_unlock(&groups_mu);
	memcpy(info + 8, &id, 8);
	return 0;
}

uint32_t HcclGetCommConfigCapability(void) { return 12; }

// log_init_env appends the HCCL environment that this init sees to the
// file FAKECANN_ENV_LOG names (tests read it: "rank R HCCL_CONNECT_TIMEOUT=v
// HCCL_EXEC_TIMEOUT=v", "-" for unset), as HCCL reads it at init.
static void log_init_env(uint32_t rank) {
	const char *path = getenv("FAKECANN_ENV_LOG");
	if (path == NULL || *path == '\0') {
		return;
	}
	const char *ct = getenv("HCCL_CONNECT_TIMEOUT"), *et = getenv("HCCL_EXEC_TIMEOUT");
	pthread_mutex_lock(&groups_mu);
	FILE *f = fopen(path, "a");
	if (f != NULL) {
		fprintf(f, "rank %u HCCL_CONNECT_TIMEOUT=%s HCCL_EXEC_TIMEOUT=%s\n", rank, ct ? ct : "-", et ? et : "-");
		fclose(f);
	}
	pthread_mutex_unlock(&groups_mu);
}

static int init(uint32_t n, const char *info, uint32_t rank, const config *cfg, void **out) {
	if (memcmp(info, "FAKECANN", 8) != 0 || n == 0 || n > MAXR || rank >= n) {
		return E_PARA;
	}
	log_init_env(rank);
	double timeout = 1836;
	if (cfg != NULL) {
		// The binding's struct must match HCCL's v10 layout.
		if (cfg->size != 2232 || cfg->magic != 0xf0f0f0f0u || cfg->version != 10 || cfg->deterministic != 1) {
			return E_PARA;
		}
		if (cfg->exec_timeout > 0) {
			timeout = cfg->exec_timeout;
		}
	}
	uint64_t id;
	memcpy(&id, info + 8, 8);
	pthread_mutex_lock(&groups_mu);
	group *g = groups;
	while (g != NULL && g->id != id) {
		g = g->next;
	}
	if (g == NULL) {
		g = calloc(1, sizeof(group));
		g->id = id;
		g->n = (int)n;
		pthread_mutex_init(&g->mu, NULL);
		pthread_cond_init(&g->cv, NULL);
		g->next = groups;
		groups = g;
	}
	pthread_mutex_unlock(&groups_mu);
	pthread_mutex_lock(&g->mu);
	if (g->n != (int)n || (g->joined >> rank) & 1) {
		pthread_mutex_unlock(&g->mu);
		return E_PARA;
	}
	g->joined |= 1 << rank;
	g->alive++;
	pthread_cond_broadcast(&g->cv);
	struct timespec ts;
	deadline_after(&ts, 20);
	int rc = 0;
	while (g->joined != (1 << n) - 1 && rc != ETIMEDOUT) {
		rc = pthread_cond_timedwait(&g->cv, &g->mu, &ts);
	}
	int ok = g->joined == (1 << n) - 1;
	pthread_mutex_unlock(&g->mu);
	if (!ok) {
		return E_TIMEOUT;
	}
	comm *c = calloc(1, sizeof(comm));
	c->g = g;
	c->rank = (int)rank;
	c->timeout = timeout;
	*out = c;
	return 0;
}

int HcclCommInitRootInfo(uint32_t n, const char *info, uint32_t rank, void **out) {
	return init(n, info, rank, NULL, out);
}

int HcclCommInitRootInfoConfig(uint32_t n, const char *info, uint32_t rank, const config *cfg, void **out) {
	return init(n, info, rank, cfg, out);
}

int HcclCommDestroy(void *p) {
	comm *c = p;
	pthread_mutex_lock(&c->g->mu);
	c->g->alive--;
	c->g->broken = 1; // a rank left: later collectives fail
	pthread_cond_broadcast(&c->g->cv);
	pthread_mutex_unlock(&c->g->mu);
	free(c);
	return 0;
}

int HcclGetCommAsyncError(void *p, int *err) {
	comm *c = p;
	*err = c->async_err;
	return 0;
}

const char *HcclGetErrorString(int code) {
	switch (code) {
	case E_PARA:
		return "parameter error";
	case E_TIMEOUT:
		return "timeout";
	}
	return "error";
}


// reduce_all writes out[i] = ins[0][off+i] op ins[1][off+i] ... in rank
// order, over every rank's snapshot of its send buffer.
static void reduce_all(int dt, int op, void *out, desc **all, int n, size_t off, size_t count) {
	char *in[n];
	for (int k = 0; k < n; k++) {
		in[k] = (char *)all[k]->snapshot;
	}
	reduce(dt, op, out, in, n, off, count);
}

// snapshot_bytes is how much of the send buffer a collective reads.
static size_t snapshot_bytes(desc *d, int n) {
	size_t es = esize(d->dtype);
	switch (d->kind) {
	case K_ALLREDUCE: case K_BROADCAST: case K_ALLGATHER: return d->count * es;
	case K_REDUCESCATTER: case K_ALLTOALL: return d->count * es * n;
	case K_ALLTOALLV: {
		size_t m = 0;
		for (int k = 0; k < n; k++) {
			size_t e = d->counts[n + k] + d->counts[k];
			m = e > m ? e : m;
		}
		return m * es;
	}
	}
	return 0;
}

// WAIT_UNTIL waits on g->cv until cond holds, the timeout passes, the
// stream is aborted or the group breaks. It yields 0 when cond holds. It
// reads no descriptor: the last rank to leave a collective frees them all.
#define WAIT_UNTIL(strm, timeout, cond)                                                  \
	({                                                                               \
		struct timespec end_;                                                    \
		deadline_after(&end_, (timeout));                                        \
		int res_ = 0;                                                            \
		for (;;) {                                                               \
			if (g->broken) {                                                 \
				res_ = E_PARA;                                           \
				break;                                                   \
			}                                                                \
			if (fakecann_aborted(strm)) {                                    \
				res_ = E_INTERNAL;                                       \
				break;                                                   \
			}                                                                \
			if (cond) {                                                      \
				break;                                                   \
			}                                                                \
			struct timespec now_, slice_;                                    \
			clock_gettime(CLOCK_REALTIME, &now_);                            \
			if (now_.tv_sec > end_.tv_sec ||                                 \
			    (now_.tv_sec == end_.tv_sec && now_.tv_nsec >= end_.tv_nsec)) { \
				res_ = E_TIMEOUT;                                        \
				break;                                                   \
			}                                                                \
			deadline_after(&slice_, 0.02);                                   \
			pthread_cond_timedwait(&g->cv, &g->mu, &slice_);                 \
		}                                                                        \
		res_;                                                                    \
	})

static void run_p2p(desc *d) {
	group *g = d->comm->g;
	void *strm = d->stream;
	double tmo = d->comm->timeout;
	int me = d->comm->rank, rc;
	size_t bytes = d->count * esize(d->dtype);
	pthread_mutex_lock(&g->mu);
	if (g->broken) {
		d->comm->async_err = E_PARA;
		pthread_mutex_unlock(&g->mu);
		return;
	}
	if (d->kind == K_SEND) {
		rc = WAIT_UNTIL(strm, tmo, g->mail[me][d->peer] == NULL);
		if (rc == 0) {
			g->mail[me][d->peer] = d;
			pthread_cond_broadcast(&g->cv);
			rc = WAIT_UNTIL(strm, tmo, g->mail[me][d->peer] != d); // HcclSend completes when received
		}
	} else {
		rc = WAIT_UNTIL(strm, tmo, g->mail[d->peer][me] != NULL);
		if (rc == 0) {
			desc *s = g->mail[d->peer][me];
			if (s->count != d->count || s->dtype != d->dtype) {
				rc = E_PARA;
			} else {
				memcpy(d->recv, s->snapshot, bytes);
			}
			g->mail[d->peer][me] = NULL;
			pthread_cond_broadcast(&g->cv);
		}
	}
	if (rc != 0) {
		d->comm->async_err = rc;
		if (rc == E_PARA) { // mismatched pair: both sides must fail
			g->broken = 1;
			pthread_cond_broadcast(&g->cv);
		}
	}
	pthread_mutex_unlock(&g->mu);
}

static void run_task(void *p) {
	desc *d = p;
	comm *c = d->comm;
	group *g = c->g;
	int n = g->n, me = c->rank;
	void *strm = d->stream;
	double tmo = c->timeout;
	size_t es = esize(d->dtype);
	size_t snap = d->kind == K_SEND ? d->count * es : snapshot_bytes(d, n);
	d->snapshot = malloc(snap ? snap : 1);
	if (snap && d->send) {
		memcpy(d->snapshot, d->send, snap);
	}
	if (d->kind == K_SEND || d->kind == K_RECV) {
		run_p2p(d);
		free(d->snapshot);
		free(d);
		return;
	}
	pthread_mutex_lock(&g->mu);
	if (g->broken) { // a rank failed or left: every later collective fails
		c->async_err = E_PARA;
		pthread_mutex_unlock(&g->mu);
		free(d->snapshot);
		free(d);
		return;
	}
	uint64_t gen = g->gen;
	g->slot[me] = d;
	g->arrived++;
	pthread_cond_broadcast(&g->cv);
	int rc = WAIT_UNTIL(strm, tmo, g->arrived == n || g->gen != gen);
	desc *all[MAXR];
	memcpy(all, g->slot, sizeof(all));
	pthread_mutex_unlock(&g->mu);
	if (rc == 0) {
		for (int k = 0; k < n; k++) {
			desc *o = all[k];
			if (o->kind != d->kind || o->dtype != d->dtype || o->op != d->op || o->root != d->root ||
			    (d->kind != K_ALLTOALLV && o->count != d->count)) {
				rc = E_PARA; // mismatched collectives
			}
		}
	}
	if (rc == 0) {
		switch (d->kind) {
		case K_ALLREDUCE:
			reduce_all(d->dtype, d->op, d->recv, all, n, 0, d->count);
			break;
		case K_REDUCESCATTER:
			reduce_all(d->dtype, d->op, d->recv, all, n, (size_t)me * d->count, d->count);
			break;
		case K_BROADCAST:
			memcpy(d->recv, all[d->root]->snapshot, d->count * es);
			break;
		case K_ALLGATHER:
			for (int k = 0; k < n; k++) {
				memcpy((char *)d->recv + (size_t)k * d->count * es, all[k]->snapshot, d->count * es);
			}
			break;
		case K_ALLTOALL:
			for (int k = 0; k < n; k++) {
				memcpy((char *)d->recv + (size_t)k * d->count * es,
				       (char *)all[k]->snapshot + (size_t)me * d->count * es, d->count * es);
			}
			break;
		case K_ALLTOALLV:
			for (int k = 0; k < n; k++) {
				uint64_t sent = all[k]->counts[me], sdispl = all[k]->counts[n + me];
				uint64_t want = d->counts[2 * n + k], rdispl = d->counts[3 * n + k];
				if (sent != want) {
					rc = E_PARA;
					break;
				}
				memcpy((char *)d->recv + rdispl * es, (char *)all[k]->snapshot + sdispl * es, sent * es);
			}
			break;
		}
	}
	pthread_mutex_lock(&g->mu);
	if (rc != 0) {
		// A mismatch breaks the group (every rank fails, as HCCL's
		// parameter checks would); a timeout or an aborted stream only
		// fails this rank, and the others wait for theirs.
		c->async_err = rc;
		if (rc == E_PARA) {
			g->broken = 1;
			pthread_cond_broadcast(&g->cv);
		}
	} else {
		g->departed++;
		if (g->departed == n) { // everyone has read every snapshot
			for (int k = 0; k < n; k++) {
				free(g->slot[k]->snapshot);
				free(g->slot[k]);
				g->slot[k] = NULL;
			}
			g->arrived = g->departed = 0;
			g->gen++;
			pthread_cond_broadcast(&g->cv);
		} else if ((rc = WAIT_UNTIL(strm, tmo, g->gen != gen)) != 0) {
			c->async_err = rc;
		}
	}
	pthread_mutex_unlock(&g->mu);
}

static int submit(comm *c, void *stream, desc *d) {
	if (c == NULL || stream == NULL) {
		return E_PTR;
	}
	if (esize(d->dtype) == 0 && d->kind != K_BARRIER) {
		return E_NOT_SUPPORT;
	}
	d->comm = c;
	d->stream = stream;
	desc *copy = malloc(sizeof(desc));
	*copy = *d;
	return fakecann_enqueue(stream, run_task, copy) == 0 ? 0 : E_PARA;
}

int HcclAllReduce(void *send, void *recv, uint64_t count, int dt, int op, void *c, void *s) {
	desc d = {.kind = K_ALLREDUCE, .dtype = dt, .op = op, .count = count, .send = send, .recv = recv};
	return submit(c, s, &d);
}
int HcclBroadcast(void *buf, uint64_t count, int dt, uint32_t root, void *c, void *s) {
	desc d = {.kind = K_BROADCAST, .dtype = dt, .count = count, .root = root, .send = buf, .recv = buf};
	return root >= (uint32_t)((comm *)c)->g->n ? E_PARA : submit(c, s, &d);
}
int HcclReduceScatter(void *send, void *recv, uint64_t count, int dt, int op, void *c, void *s) {
	desc d = {.kind = K_REDUCESCATTER, .dtype = dt, .op = op, .count = count, .send = send, .recv = recv};
	return submit(c, s, &d);
}
int HcclAllGather(void *send, void *recv, uint64_t count, int dt, void *c, void *s) {
	desc d = {.kind = K_ALLGATHER, .dtype = dt, .count = count, .send = send, .recv = recv};
	return submit(c, s, &d);
}
int HcclAlltoAll(const void *send, uint64_t sc, int st, const void *recv, uint64_t rc, int rt, void *c, void *s) {
	if (sc != rc || st != rt) {
		return E_PARA;
	}
	desc d = {.kind = K_ALLTOALL, .dtype = st, .count = sc, .send = send, .recv = (void *)recv};
	return submit(c, s, &d);
}
int HcclAlltoAllV(const void *send, const uint64_t *scounts, const uint64_t *sdispls, int st, const void *recv,
		  const uint64_t *rcounts, const uint64_t *rdispls, int rt, void *c, void *s) {
	if (st != rt) {
		return E_PARA;
	}
	int n = ((comm *)c)->g->n;
	desc d = {.kind = K_ALLTOALLV, .dtype = st, .send = send, .recv = (void *)recv};
	for (int k = 0; k < n; k++) { // HCCL reads the host arrays during the call
		d.counts[k] = scounts[k];
		d.counts[n + k] = sdispls[k];
		d.counts[2 * n + k] = rcounts[k];
		d.counts[3 * n + k] = rdispls[k];
	}
	return submit(c, s, &d);
}
int HcclBarrier(void *c, void *s) {
	desc d = {.kind = K_BARRIER, .dtype = 4};
	return submit(c, s, &d);
}
int HcclSend(void *buf, uint64_t count, int dt, uint32_t peer, void *c, void *s) {
	desc d = {.kind = K_SEND, .dtype = dt, .count = count, .peer = peer, .send = buf};
	return peer >= (uint32_t)((comm *)c)->g->n ? E_PARA : submit(c, s, &d);
}
int HcclRecv(void *buf, uint64_t count, int dt, uint32_t peer, void *c, void *s) {
	desc d = {.kind = K_RECV, .dtype = dt, .count = count, .peer = peer, .recv = buf};
	return peer >= (uint32_t)((comm *)c)->g->n ? E_PARA : submit(c, s, &d);
}
#endif // FAKE_HCCL
