// STAND-IN CANN (test double): libhccl.so, not Huawei's HCCL. It gives the
// HCCL calls that hccl/ascend's binding makes (shim.c) their documented
// semantics for ranks that are separate PROCESSES on one host, so that
// npuserve's TP/DP/EP ranks run on --device ascend over the stand-in.
//
// Rendezvous: HcclGetRootInfo starts a hub (a thread of the calling
// process, normally rank 0's) listening on HCCL_IF_IP (default 127.0.0.1)
// and writes that address, its port
// and a random id into the 4108-byte root info; HcclCommInitRootInfo(Config)
// connects every rank to it (over TCP) and returns once all n ranks have
// joined, or fails after HCCL_CONNECT_TIMEOUT (default 120 s). The hub
// matches the ranks' requests (collectives in call order, Send/Recv by
// peer) and computes every result once, in rank order, so all ranks get
// the same bits.
//
// Collectives are enqueued on the caller's stand-in stream (libascendcl's
// standin_enqueue): they run in stream order, read and write stand-in
// device memory when the stream runs them, and are invisible before a
// sync. A collective some rank never joins fails after the execution
// timeout (HcclCommConfig.hcclExecTimeOut, else HCCL_EXEC_TIMEOUT, default
// 1836 s, 0 = never), a rank process that dies or destroys its
// communicator makes the others' pending and later collectives fail at
// once (HCCL_E_REMOTE), and an aborted stream (aclrtStreamAbort) ends a
// wait in progress. Failures are asynchronous, as on a device: the stream
// completes and HcclGetCommAsyncError reports the error (its message goes
// to aclGetRecentErrMsg). Argument errors (dtype, counts, pointers outside
// device memory, rank out of range, a destroyed communicator, a stream of
// another device's context) are refused when the call is made.
//
// Environment: HCCL_CONNECT_TIMEOUT, HCCL_EXEC_TIMEOUT (seconds, read at
// each init; a config's hcclExecTimeOut takes precedence);
// STANDIN_HCCL_CAPABILITY (HcclGetCommConfigCapability, default 12);
// STANDIN_HCCL_LOG names a file to which each HcclGetRootInfo and init
// appends the timeouts it saw ("root HCCL_CONNECT_TIMEOUT=v
// HCCL_EXEC_TIMEOUT=v", "rank R/N HCCL_CONNECT_TIMEOUT=v
// HCCL_EXEC_TIMEOUT=v exec_timeout=s"; "-" when unset) and each
// communicator its first failure ("rank R/N failed (HcclResult c, …): why").
#define _GNU_SOURCE
#include "standin.h"
#include "hccl_common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

// HcclResult (hccl_types.h).
enum {
	H_SUCCESS = 0,
	E_PARA = 1,
	E_PTR = 2,
	E_MEMORY = 3,
	E_INTERNAL = 4,
	E_NOT_SUPPORT = 5,
	E_TIMEOUT = 9,
	E_TCP_CONNECT = 11,
	E_TCP_TRANSFER = 13,
	E_REMOTE = 21,
};

// Operation kinds (the wire's, not HCCL's).
enum { K_ALLREDUCE = 1, K_BROADCAST, K_REDUCESCATTER, K_ALLGATHER, K_ALLTOALL, K_ALLTOALLV, K_BARRIER, K_SEND, K_RECV };
static const char *kind_name(int k) {
	static const char *names[] = {"?", "AllReduce", "Broadcast", "ReduceScatter", "AllGather", "AlltoAll", "AlltoAllV", "Barrier", "Send", "Recv"};
	return k >= 0 && k <= K_RECV ? names[k] : "?";
}

#define ROOT_BYTES 4108
#define ROOT_MAGIC "STANDIN-HCCL-1"
#define MAXR 64
#define COMM_MAGIC 0xcc11cc11u

// ---- helpers ----

static double now_s(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// env_seconds reads a variable of whole seconds (def when unset or bad).
static double env_seconds(const char *name, double def) {
	const char *v = getenv(name);
	if (v == NULL || *v == '\0') {
		return def;
	}
	char *end;
	double s = strtod(v, &end);
	return end == v || s < 0 ? def : s;
}

// reducible: the (dtype, op) pairs HCCL reduces (A2/A3: no Prod on BF16).
static int reducible(int dt, int op) {
	if (op < 0 || op > 3) {
		return 0;
	}
	switch (dt) {
	case 0: case 2: case 3: case 4: case 5: return 1;
	case 11: return op != 1;
	}
	return 0;
}

// ---- wire ----

enum { M_HELLO = 1, M_READY, M_OP, M_RESULT, M_ERROR, M_BYE };

typedef struct {
	uint32_t type, kind;
	int32_t dtype, op;
	uint32_t rank, peer; // peer: Broadcast's root, Send/Recv's peer
	int32_t code;        // M_ERROR: the HcclResult
	uint32_t pad;
	uint64_t seq;    // M_HELLO: the root info's id; M_OP: the collective's number
	uint64_t count;  // M_HELLO: n; M_OP: elements (HCCL's count argument)
	uint64_t nbytes; // payload bytes that follow
} hdr;

static int write_all(int fd, const void *p, size_t n) {
	const char *b = p;
	while (n > 0) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR) {
			continue;
		}
		if (w <= 0) {
			return -1;
		}
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static int read_all(int fd, void *p, size_t n) {
	char *b = p;
	while (n > 0) {
		ssize_t r = recv(fd, b, n, 0);
		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r <= 0) {
			return -1;
		}
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static int send_msg(int fd, const hdr *h, const void *a, size_t na, const void *b, size_t nb) {
	hdr x = *h;
	x.nbytes = na + nb;
	if (write_all(fd, &x, sizeof x) || (na && write_all(fd, a, na)) || (nb && write_all(fd, b, nb))) {
		return -1;
	}
	return 0;
}

// read_msg reads a header and its payload (malloc'd into *pl).
static int read_msg(int fd, hdr *h, char **pl) {
	*pl = NULL;
	if (read_all(fd, h, sizeof *h)) {
		return -1;
	}
	if (h->nbytes > ((uint64_t)1 << 36)) {
		return -1;
	}
	*pl = malloc(h->nbytes ? h->nbytes : 1);
	if (*pl == NULL || (h->nbytes && read_all(fd, *pl, h->nbytes))) {
		free(*pl);
		*pl = NULL;
		return -1;
	}
	return 0;
}

static int send_error(int fd, int code, const char *msg) {
	hdr h = {.type = M_ERROR, .code = code};
	return send_msg(fd, &h, msg, strlen(msg) + 1, NULL, 0);
}

static void log_env(const char *who, const char *extra);

// ---- the hub (one per root info, in HcclGetRootInfo's process) ----

enum { IDLE, WAITING };

typedef struct {
	int fd; // -1: not connected (yet, or any more)
	int joined, left, state;
	int local; // the rank runs in the hub's process
	hdr req;
	char *pl;
} hub_rank;

typedef struct {
	int lfd;
	uint64_t id;
	int n;       // 0 until the first hello
	int joined;  // ranks that said hello
	int ready;   // every rank joined: READY sent
	int done;    // ranks that left (BYE or a closed connection)
	int broken;  // a rank left or failed: every request is answered with why
	int code;
	char why[512];
	hub_rank r[MAXR];
	int pending[2 * MAXR]; // accepted connections without a hello yet
	int npending;
	double deadline; // by when every rank must have joined
	// order answers the other processes' ranks before the hub's own
	// process's: a local rank may return from its collective and exit (the
	// hub with it) before a reply to another process is written.
	int order[MAXR];
} hub;

static void hub_break(hub *h, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// hub_break marks the communicator failed and answers every waiting rank.
static void hub_break(hub *h, int code, const char *fmt, ...) {
	if (!h->broken) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(h->why, sizeof h->why, fmt, ap);
		va_end(ap);
		h->broken = 1;
		h->code = code;
	}
	for (int k = 0; k < h->n; k++) {
		if (h->r[k].fd >= 0 && h->r[k].state == WAITING) {
			send_error(h->r[k].fd, h->code, h->why);
			h->r[k].state = IDLE;
			free(h->r[k].pl);
			h->r[k].pl = NULL;
		}
	}
}

static void hub_drop(hub *h, int k, const char *how) {
	hub_rank *r = &h->r[k];
	if (r->fd < 0) {
		return;
	}
	close(r->fd);
	r->fd = -1;
	free(r->pl);
	r->pl = NULL;
	r->state = IDLE;
	if (!r->left) {
		r->left = 1;
		h->done++;
	}
	hub_break(h, E_REMOTE, "stand-in hccl: rank %d of %d %s", k, h->n, how);
}

static void reply(hub *h, int k, const void *a, size_t na, const void *b, size_t nb) {
	hub_rank *r = &h->r[k];
	if (r->fd < 0 || r->state != WAITING) {
		return; // answered already (the communicator broke meanwhile)
	}
	hdr x = {.type = M_RESULT, .kind = r->req.kind, .seq = r->req.seq};
	free(r->pl);
	r->pl = NULL;
	r->state = IDLE;
	if (send_msg(r->fd, &x, a, na, b, nb)) {
		hub_drop(h, k, "is gone (its connection failed)");
	}
}

// run_collective runs the collective every rank has asked for, or breaks
// the communicator when the ranks disagree about it.
static void run_collective(hub *h) {
	int n = h->n;
	hdr *q0 = &h->r[0].req;
	for (int k = 1; k < n; k++) {
		hdr *q = &h->r[k].req;
		if (q->kind != q0->kind || q->seq != q0->seq) {
			hub_break(h, E_PARA, "stand-in hccl: collective #%llu: rank 0 called %s, rank %d %s (#%llu): every rank must make the same calls in the same order",
				  (unsigned long long)q0->seq, kind_name(q0->kind), k, kind_name(q->kind), (unsigned long long)q->seq);
			return;
		}
		int same = q->dtype == q0->dtype && (q0->kind == K_ALLTOALLV || q->count == q0->count);
		if (q0->kind == K_ALLREDUCE || q0->kind == K_REDUCESCATTER) {
			same = same && q->op == q0->op;
		}
		if (q0->kind == K_BROADCAST) {
			same = same && q->peer == q0->peer;
		}
		if (q0->kind == K_BARRIER) {
			same = 1;
		}
		if (!same) {
			hub_break(h, E_PARA, "stand-in hccl: %s #%llu: rank %d's arguments (count %llu, dtype %d, op %d, root %u) differ from rank 0's (count %llu, dtype %d, op %d, root %u)",
				  kind_name(q0->kind), (unsigned long long)q0->seq, k, (unsigned long long)q->count, q->dtype, q->op, q->peer,
				  (unsigned long long)q0->count, q0->dtype, q0->op, q0->peer);
			return;
		}
	}
	int dt = q0->dtype, op = q0->op;
	size_t es = esize(dt), cnt = q0->count, blk = cnt * es;
	char *in[MAXR];
	for (int k = 0; k < n; k++) {
		in[k] = h->r[k].pl;
		size_t want = 0, got = h->r[k].req.nbytes;
		switch (q0->kind) {
		case K_ALLREDUCE: case K_ALLGATHER: want = blk; break;
		case K_BROADCAST: want = k == (int)q0->peer ? blk : 0; break;
		case K_REDUCESCATTER: case K_ALLTOALL: want = blk * n; break;
		case K_ALLTOALLV:
			want = 2 * n * 8;
			for (int d = 0; d < n && got >= (size_t)(2 * n * 8); d++) {
				want += ((uint64_t *)in[k])[d] * es;
			}
			break;
		}
		if (got != want) {
			hub_break(h, E_INTERNAL, "stand-in hccl: %s #%llu: rank %d sent %zu bytes, want %zu", kind_name(q0->kind), (unsigned long long)q0->seq, k, got, want);
			return;
		}
	}
	switch (q0->kind) {
	case K_ALLREDUCE: {
		char *out = malloc(blk ? blk : 1);
		reduce(dt, op, out, in, n, 0, cnt);
		for (int i = 0; i < n; i++) {
			reply(h, h->order[i], out, blk, NULL, 0);
		}
		free(out);
		break;
	}
	case K_REDUCESCATTER: {
		char *out = malloc((blk ? blk : 1) * n);
		for (int k = 0; k < n; k++) {
			reduce(dt, op, out + k * blk, in, n, k * cnt, cnt);
		}
		for (int i = 0; i < n; i++) {
			int k = h->order[i];
			reply(h, k, out + k * blk, blk, NULL, 0);
		}
		free(out);
		break;
	}
	case K_BROADCAST: {
		int root = (int)q0->peer;
		char *data = h->r[root].pl;
		h->r[root].pl = NULL; // reply frees the payload it answers
		for (int i = 0; i < n; i++) {
			int k = h->order[i];
			reply(h, k, data, k == root ? 0 : blk, NULL, 0);
		}
		free(data);
		break;
	}
	case K_ALLGATHER: {
		char *out = malloc((blk ? blk : 1) * n);
		for (int k = 0; k < n; k++) {
			memcpy(out + k * blk, in[k], blk);
		}
		for (int i = 0; i < n; i++) {
			reply(h, h->order[i], out, blk * n, NULL, 0);
		}
		free(out);
		break;
	}
	case K_ALLTOALL: {
		char *out = malloc((blk ? blk : 1) * n * n);
		for (int r = 0; r < n; r++) {
			for (int k = 0; k < n; k++) {
				memcpy(out + (r * n + k) * blk, in[k] + r * blk, blk);
			}
		}
		for (int i = 0; i < n; i++) {
			int r = h->order[i];
			reply(h, r, out + r * n * blk, n * blk, NULL, 0);
		}
		free(out);
		break;
	}
	case K_ALLTOALLV: {
		// Payload of rank k: scounts[n], rcounts[n] (uint64), then its
		// segment for each destination in rank order.
		uint64_t *sc[MAXR], *rc[MAXR];
		size_t off[MAXR][MAXR];
		for (int k = 0; k < n; k++) {
			sc[k] = (uint64_t *)in[k];
			rc[k] = sc[k] + n;
			size_t o = 2 * n * 8;
			for (int d = 0; d < n; d++) {
				off[k][d] = o;
				o += sc[k][d] * es;
			}
		}
		for (int r = 0; r < n; r++) {
			for (int k = 0; k < n; k++) {
				if (sc[k][r] != rc[r][k]) {
					hub_break(h, E_PARA, "stand-in hccl: AlltoAllV #%llu: rank %d sends %llu elements to rank %d, which expects %llu",
						  (unsigned long long)q0->seq, k, (unsigned long long)sc[k][r], r, (unsigned long long)rc[r][k]);
					return;
				}
			}
		}
		char *outs[MAXR];
		size_t lens[MAXR];
		for (int r = 0; r < n; r++) {
			size_t len = 0;
			for (int k = 0; k < n; k++) {
				len += rc[r][k] * es;
			}
			outs[r] = malloc(len ? len : 1);
			lens[r] = len;
			size_t o = 0;
			for (int k = 0; k < n; k++) {
				memcpy(outs[r] + o, in[k] + off[k][r], sc[k][r] * es);
				o += sc[k][r] * es;
			}
		}
		for (int i = 0; i < n; i++) {
			int r = h->order[i];
			reply(h, r, outs[r], lens[r], NULL, 0);
		}
		for (int r = 0; r < n; r++) {
			free(outs[r]);
		}
		break;
	}
	case K_BARRIER:
		for (int i = 0; i < n; i++) {
			reply(h, h->order[i], NULL, 0, NULL, 0);
		}
		break;
	}
}

// match runs what the waiting requests allow.
static void match(hub *h) {
	if (!h->ready || h->broken) {
		return;
	}
	int coll = 0;
	for (int k = 0; k < h->n; k++) {
		hub_rank *r = &h->r[k];
		if (r->state != WAITING) {
			continue;
		}
		if (r->req.kind == K_SEND) {
			hub_rank *p = &h->r[r->req.peer];
			if (p->state == WAITING && p->req.kind == K_RECV && p->req.peer == (uint32_t)k) {
				if (p->req.count != r->req.count || p->req.dtype != r->req.dtype) {
					hub_break(h, E_PARA, "stand-in hccl: rank %d sends %llu elements of dtype %d to rank %u, which receives %llu of dtype %d",
						  k, (unsigned long long)r->req.count, r->req.dtype, r->req.peer, (unsigned long long)p->req.count, p->req.dtype);
					return;
				}
				char *data = r->pl;
				size_t nb = r->req.nbytes;
				r->pl = NULL;
				// HcclSend completes once received; the hub's own process
				// is answered last (it may exit right after).
				if (r->local) {
					reply(h, (int)r->req.peer, data, nb, NULL, 0);
					reply(h, k, NULL, 0, NULL, 0);
				} else {
					reply(h, k, NULL, 0, NULL, 0);
					reply(h, (int)r->req.peer, data, nb, NULL, 0);
				}
				free(data);
				if (h->broken) {
					return;
				}
			}
		} else if (r->req.kind != K_RECV) {
			coll++;
		}
	}
	if (coll == h->n) {
		run_collective(h);
	}
}

static void hub_hello(hub *h, int fd, const hdr *q) {
	int k = (int)q->rank;
	const char *bad = NULL;
	char msg[256];
	if (q->seq != h->id) {
		bad = "a root info of another communicator";
	} else if (q->count == 0 || q->count > MAXR || (h->n != 0 && q->count != (uint64_t)h->n)) {
		snprintf(msg, sizeof msg, "rank %d says the communicator has %llu ranks, others %d (at most %d)", k, (unsigned long long)q->count, h->n, MAXR);
		bad = msg;
	} else if (q->rank >= q->count) {
		bad = "rank out of range";
	} else if (h->r[k].joined) {
		snprintf(msg, sizeof msg, "rank %d joined twice", k);
		bad = msg;
	} else if (h->broken) {
		bad = h->why;
	}
	if (bad != NULL) {
		send_error(fd, E_PARA, bad);
		close(fd);
		return;
	}
	if (h->n == 0) {
		h->n = (int)q->count;
		for (int i = 0; i < h->n; i++) {
			h->r[i].fd = -1;
		}
	}
	h->r[k].fd = fd;
	h->r[k].joined = 1;
	h->joined++;
	h->r[k].local = q->peer == (uint32_t)getpid();
	if (h->joined == h->n) {
		h->ready = 1;
		int i = 0;
		for (int pass = 0; pass < 2; pass++) {
			for (int r = 0; r < h->n; r++) {
				if (h->r[r].local == pass) {
					h->order[i++] = r;
				}
			}
		}
		for (int i = 0; i < h->n; i++) {
			hdr x = {.type = M_READY};
			if (h->r[i].fd >= 0 && send_msg(h->r[i].fd, &x, NULL, 0, NULL, 0)) {
				hub_drop(h, i, "is gone (its connection failed)");
			}
		}
	}
}

static void hub_request(hub *h, int k) {
	hub_rank *r = &h->r[k];
	hdr q;
	char *pl;
	if (read_msg(r->fd, &q, &pl)) {
		hub_drop(h, k, "is gone: its connection closed (the process exited or was killed)");
		return;
	}
	if (q.type == M_ERROR) { // the rank failed (its timeout) and leaves
		r->left = 1;
		h->done++;
		close(r->fd);
		r->fd = -1;
		hub_break(h, E_REMOTE, "stand-in hccl: rank %d of %d failed and left the communicator: %.300s", k, h->n, pl);
		free(pl);
		return;
	}
	if (q.type == M_BYE) {
		free(pl);
		r->left = 1;
		h->done++;
		close(r->fd);
		r->fd = -1;
		hub_break(h, E_REMOTE, "stand-in hccl: rank %d of %d destroyed its communicator", k, h->n);
		return;
	}
	if (q.type != M_OP || r->state == WAITING || ((q.kind == K_SEND || q.kind == K_RECV) && (q.peer >= (uint32_t)h->n || q.peer == (uint32_t)k))) {
		free(pl);
		hub_drop(h, k, "broke the protocol");
		return;
	}
	if (h->broken) {
		free(pl);
		send_error(r->fd, h->code, h->why);
		return;
	}
	r->req = q;
	r->pl = pl;
	r->state = WAITING;
	match(h);
}

static void *hub_main(void *p) {
	hub *h = p;
	for (;;) {
		struct pollfd fds[1 + 3 * MAXR];
		int who[1 + 3 * MAXR]; // >= 0: rank; -1 - i: pending[i]; MAXR*4: listener
		int nf = 0;
		if (h->lfd >= 0) {
			fds[nf] = (struct pollfd){h->lfd, POLLIN, 0};
			who[nf++] = 4 * MAXR;
		}
		for (int i = 0; i < h->npending; i++) {
			fds[nf] = (struct pollfd){h->pending[i], POLLIN, 0};
			who[nf++] = -1 - i;
		}
		for (int k = 0; k < h->n; k++) {
			if (h->r[k].fd >= 0) {
				fds[nf] = (struct pollfd){h->r[k].fd, POLLIN, 0};
				who[nf++] = k;
			}
		}
		if (h->n > 0 && h->done == h->n) {
			break; // every rank has left
		}
		if (!h->ready && now_s() > h->deadline) {
			hub_break(h, E_TIMEOUT, "stand-in hccl: not every rank joined in time");
			for (int k = 0; k < h->n; k++) {
				if (h->r[k].fd >= 0) {
					send_error(h->r[k].fd, E_TIMEOUT, h->why);
				}
			}
			break;
		}
		if (poll(fds, (nfds_t)nf, 200) <= 0) {
			continue;
		}
		for (int i = nf - 1; i >= 0; i--) { // pending entries are removed from the end
			if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
				continue;
			}
			int w = who[i];
			if (w == 4 * MAXR) {
				int fd = accept(h->lfd, NULL, NULL);
				if (fd >= 0 && h->npending < 2 * MAXR) {
					int one = 1;
					setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
					h->pending[h->npending++] = fd;
				} else if (fd >= 0) {
					close(fd);
				}
			} else if (w < 0) {
				int idx = -1 - w, fd = h->pending[idx];
				h->pending[idx] = h->pending[--h->npending];
				hdr q;
				char *pl;
				if (read_msg(fd, &q, &pl) || q.type != M_HELLO) {
					free(pl);
					close(fd);
					continue;
				}
				free(pl);
				hub_hello(h, fd, &q);
			} else if (h->r[w].fd == fds[i].fd) {
				hub_request(h, w);
			}
		}
		if (h->ready && h->lfd >= 0) {
			close(h->lfd); // single use: every rank is in
			h->lfd = -1;
		}
	}
	if (h->lfd >= 0) {
		close(h->lfd);
	}
	for (int i = 0; i < h->npending; i++) {
		close(h->pending[i]);
	}
	for (int k = 0; k < h->n; k++) {
		if (h->r[k].fd >= 0) {
			close(h->r[k].fd);
		}
		free(h->r[k].pl);
	}
	free(h);
	return NULL;
}

// ---- the API ----

typedef struct rootinfo {
	char magic[16];
	uint64_t id;
	uint32_t port;
	char host[64];
} rootinfo;

int HcclGetRootInfo(char *info) {
	if (info == NULL) {
		return standin_violation(E_PTR, "hccl-non-null", "HcclGetRootInfo(NULL)");
	}
	// The rendezvous listens where HCCL bootstraps: HCCL_IF_IP (IPv4), else
	// the loopback address (HCCL_SOCKET_IFNAME is not read).
	const char *ip = getenv("HCCL_IF_IP");
	if (ip == NULL || *ip == '\0') {
		ip = "127.0.0.1";
	}
	struct sockaddr_in a = {.sin_family = AF_INET};
	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1 || strlen(ip) >= 64) {
		return standin_violation(E_PARA, "hccl-if-ip", "HcclGetRootInfo: HCCL_IF_IP=%s is not an IPv4 address (the stand-in takes IPv4 only)", ip);
	}
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	socklen_t al = sizeof a;
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 2 * MAXR) || getsockname(fd, (struct sockaddr *)&a, &al)) {
		standin_set_error("stand-in hccl: HcclGetRootInfo: cannot listen on %s: %s", ip, strerror(errno));
		if (fd >= 0) {
			close(fd);
		}
		return E_TCP_CONNECT;
	}
	hub *h = calloc(1, sizeof *h);
	h->lfd = fd;
	int rnd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (rnd < 0 || read(rnd, &h->id, sizeof h->id) != sizeof h->id) {
		h->id = ((uint64_t)getpid() << 32) ^ (uint64_t)(now_s() * 1e9);
	}
	if (rnd >= 0) {
		close(rnd);
	}
	// Ranks must join within HCCL's link-setup time (+20 s, as HCCL).
	h->deadline = now_s() + env_seconds("HCCL_CONNECT_TIMEOUT", 120) + 20;
	log_env("root", "");
	rootinfo ri = {.id = h->id, .port = ntohs(a.sin_port)};
	snprintf(ri.magic, sizeof ri.magic, "%s", ROOT_MAGIC);
	snprintf(ri.host, sizeof ri.host, "%s", ip);
	pthread_t th;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &at, hub_main, h) != 0) {
		close(fd);
		free(h);
		return E_INTERNAL;
	}
	pthread_attr_destroy(&at);
	memset(info, 0, ROOT_BYTES);
	memcpy(info, &ri, sizeof ri);
	return 0;
}

// HcclGetCommConfigCapability: every config field up to hcclQos (12), or
// STANDIN_HCCL_CAPABILITY (an older HCCL: 8 has no hcclExecTimeOut, so
// only HCCL_EXEC_TIMEOUT bounds a collective).
uint32_t HcclGetCommConfigCapability(void) { return (uint32_t)env_seconds("STANDIN_HCCL_CAPABILITY", 12); }


typedef struct comm {
	uint32_t magic;
	int fd, rank, n;
	double exec_timeout; // seconds, 0: never
	char name[128];
	uint64_t seq; // collectives so far
	pthread_mutex_t mu;
	pthread_mutex_t io; // one operation at a time on the connection
	int refs;     // the caller's (until destroyed) + one per enqueued operation
	int inflight; // operations running on a stream now
	int dead;     // destroyed
	int async_err;
	char errmsg[768];
	double since; // when init returned
	struct comm *next;
} comm;

static pthread_mutex_t comms_mu = PTHREAD_MUTEX_INITIALIZER;
static comm *comms; // live communicators

// live finds c among the live communicators (comms_mu held by the caller).
static int live(comm *c) {
	for (comm *x = comms; x != NULL; x = x->next) {
		if (x == c) {
			return 1;
		}
	}
	return 0;
}

// acquire returns p with a reference taken when it is a live
// communicator, else NULL.
static comm *acquire(void *p) {
	comm *c = NULL;
	pthread_mutex_lock(&comms_mu);
	if (live(p)) {
		c = p;
		pthread_mutex_lock(&c->mu);
		c->refs++;
		pthread_mutex_unlock(&c->mu);
	}
	pthread_mutex_unlock(&comms_mu);
	return c;
}

static void comm_unref(comm *c);

// log_line appends a line to the file STANDIN_HCCL_LOG names, if any.
static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...) {
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	const char *path = getenv("STANDIN_HCCL_LOG");
	if (path == NULL || *path == '\0') {
		return;
	}
	pthread_mutex_lock(&mu);
	FILE *f = fopen(path, "a");
	if (f != NULL) {
		va_list ap;
		va_start(ap, fmt);
		vfprintf(f, fmt, ap);
		va_end(ap);
		fputc('\n', f);
		fclose(f);
	}
	pthread_mutex_unlock(&mu);
}

// log_env logs "who HCCL_CONNECT_TIMEOUT=v HCCL_EXEC_TIMEOUT=v extra" ("-":
// unset): what HCCL reads at this call.
static void log_env(const char *who, const char *extra) {
	const char *ct = getenv("HCCL_CONNECT_TIMEOUT"), *et = getenv("HCCL_EXEC_TIMEOUT");
	log_line("%s HCCL_CONNECT_TIMEOUT=%s HCCL_EXEC_TIMEOUT=%s%s", who, ct ? ct : "-", et ? et : "-", extra);
}

static void log_init(uint32_t rank, uint32_t n, double exec) {
	char who[64], extra[64];
	snprintf(who, sizeof who, "rank %u/%u", rank, n);
	snprintf(extra, sizeof extra, " exec_timeout=%g", exec);
	log_env(who, extra);
}

// wait_readable waits until fd has data, the deadline (0: none) passes,
// or stream (when not NULL) is aborted: 0, E_TIMEOUT or E_INTERNAL.
static int wait_readable(int fd, double deadline, void *stream, uint64_t aborts) {
	for (;;) {
		struct pollfd p = {fd, POLLIN, 0};
		int r = poll(&p, 1, 20);
		if (r > 0) {
			return 0;
		}
		if (r < 0 && errno != EINTR) {
			return 0; // the read reports it
		}
		if (stream != NULL && standin_stream_aborts(stream) != aborts) {
			return E_INTERNAL;
		}
		if (deadline > 0 && now_s() > deadline) {
			return E_TIMEOUT;
		}
	}
}

static int init(uint32_t n, const char *info, uint32_t rank, const config *cfg, void **out) {
	if (info == NULL || out == NULL) {
		return standin_violation(E_PTR, "hccl-non-null", "HcclCommInitRootInfo: NULL root info or comm");
	}
	rootinfo ri;
	memcpy(&ri, info, sizeof ri);
	if (strncmp(ri.magic, ROOT_MAGIC, sizeof ri.magic) != 0) {
		return standin_violation(E_PARA, "hccl-root-info", "HcclCommInitRootInfo: not a root info from this HcclGetRootInfo");
	}
	if (n == 0 || n > MAXR || rank >= n) {
		return standin_violation(E_PARA, "hccl-rank-range", "HcclCommInitRootInfo: rank %u of %u ranks (the stand-in has at most %d)", rank, n, MAXR);
	}
	double exec = env_seconds("HCCL_EXEC_TIMEOUT", 1836);
	if (cfg != NULL) {
		// HcclCommConfigInit's prefix, and the binding's v10 layout.
		if (cfg->size != 2232 || cfg->magic != 0xf0f0f0f0u || cfg->version != 10) {
			return standin_violation(E_PARA, "hccl-config", "HcclCommInitRootInfoConfig: config size %zu magic %#x version %u, want 2232, 0xf0f0f0f0, 10",
						 cfg->size, cfg->magic, cfg->version);
		}
		if (cfg->exec_timeout > 0) {
			exec = cfg->exec_timeout;
		}
	}
	log_init(rank, n, exec);
	double deadline = now_s() + env_seconds("HCCL_CONNECT_TIMEOUT", 120) + 20;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)ri.port)};
	inet_pton(AF_INET, ri.host, &a.sin_addr);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
		standin_set_error("stand-in hccl: rank %u cannot reach the root info's hub at %s:%u: %s (did its process exit?)", rank, ri.host, ri.port, strerror(errno));
		if (fd >= 0) {
			close(fd);
		}
		return E_TCP_CONNECT;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	hdr hello = {.type = M_HELLO, .rank = rank, .peer = (uint32_t)getpid(), .seq = ri.id, .count = n};
	hdr r;
	char *pl = NULL;
	int rc = send_msg(fd, &hello, NULL, 0, NULL, 0) ? E_TCP_TRANSFER : wait_readable(fd, deadline, NULL, 0);
	if (rc == 0 && read_msg(fd, &r, &pl)) {
		rc = E_TCP_TRANSFER;
	}
	if (rc == E_TIMEOUT) {
		standin_set_error("stand-in hccl: rank %u of %u: not every rank joined within HCCL_CONNECT_TIMEOUT+20 s", rank, n);
	} else if (rc != 0) {
		standin_set_error("stand-in hccl: rank %u of %u: the hub's connection closed during init (its process exited?)", rank, n);
	} else if (r.type == M_ERROR) {
		rc = r.code;
		standin_set_error("%s", pl);
	} else if (r.type != M_READY) {
		rc = E_INTERNAL;
	}
	free(pl);
	if (rc != 0) {
		close(fd);
		return rc;
	}
	comm *c = calloc(1, sizeof *c);
	c->magic = COMM_MAGIC;
	c->fd = fd;
	c->rank = (int)rank;
	c->n = (int)n;
	c->exec_timeout = exec;
	c->since = now_s();
	if (cfg != NULL) {
		snprintf(c->name, sizeof c->name, "%s", cfg->name);
	}
	c->refs = 1;
	pthread_mutex_init(&c->mu, NULL);
	pthread_mutex_init(&c->io, NULL);
	pthread_mutex_lock(&comms_mu);
	c->next = comms;
	comms = c;
	pthread_mutex_unlock(&comms_mu);
	*out = c;
	return 0;
}

int HcclCommInitRootInfo(uint32_t n, const char *info, uint32_t rank, void **out) { return init(n, info, rank, NULL, out); }

int HcclCommInitRootInfoConfig(uint32_t n, const char *info, uint32_t rank, const config *cfg, void **out) {
	return init(n, info, rank, cfg, out);
}

// comm_unref drops a reference and frees c with the last one.
static void comm_unref(comm *c) {
	pthread_mutex_lock(&c->mu);
	int last = --c->refs == 0;
	pthread_mutex_unlock(&c->mu);
	if (last) {
		close(c->fd);
		c->magic = 0;
		pthread_mutex_destroy(&c->mu);
		pthread_mutex_destroy(&c->io);
		free(c);
	}
}

int HcclCommDestroy(void *p) {
	comm *c = p;
	pthread_mutex_lock(&comms_mu);
	int ok = live(c);
	if (ok) {
		for (comm **pc = &comms; *pc != NULL; pc = &(*pc)->next) {
			if (*pc == c) {
				*pc = c->next;
				break;
			}
		}
	}
	pthread_mutex_unlock(&comms_mu);
	if (!ok) {
		return standin_violation(E_PTR, "hccl-live-comm", "HcclCommDestroy(%p): not a live communicator", p);
	}
	pthread_mutex_lock(&c->mu);
	c->dead = 1;
	if (c->inflight > 0) {
		shutdown(c->fd, SHUT_RDWR); // the collective in flight fails at once
	} else {
		hdr bye = {.type = M_BYE, .rank = (uint32_t)c->rank};
		send_msg(c->fd, &bye, NULL, 0, NULL, 0);
	}
	pthread_mutex_unlock(&c->mu);
	comm_unref(c); // operations still queued skip, and free it
	return 0;
}

int HcclGetCommAsyncError(void *p, int *err) {
	comm *c = acquire(p);
	if (c == NULL || err == NULL) {
		if (c != NULL) {
			comm_unref(c);
		}
		return standin_violation(E_PTR, "hccl-live-comm", "HcclGetCommAsyncError(%p): not a live communicator (or NULL result)", p);
	}
	pthread_mutex_lock(&c->mu);
	*err = c->async_err;
	if (c->async_err != 0) {
		standin_set_error("%s", c->errmsg);
	}
	pthread_mutex_unlock(&c->mu);
	comm_unref(c);
	return 0;
}

const char *HcclGetErrorString(int code) {
	switch (code) {
	case H_SUCCESS: return "success";
	case E_PARA: return "parameter error";
	case E_PTR: return "invalid pointer";
	case E_INTERNAL: return "internal error";
	case E_NOT_SUPPORT: return "not supported";
	case E_TIMEOUT: return "timeout";
	case E_TCP_CONNECT: return "TCP connection failed";
	case E_TCP_TRANSFER: return "TCP transfer failed";
	case E_REMOTE: return "error on a remote rank";
	}
	return "unknown HCCL error";
}

// desc is one enqueued operation.
typedef struct desc {
	comm *c;
	void *stream;
	uint64_t aborts; // the stream's abort count when it was enqueued
	int kind, dtype, op;
	uint32_t peer;
	uint64_t count, seq;
	const char *send;
	char *recv;
	uint64_t *counts; // AlltoAllV: send counts, send displs, recv counts, recv displs
} desc;

static void desc_free(void *p) {
	desc *d = p;
	if (d->c != NULL) {
		comm_unref(d->c);
	}
	free(d->counts);
	free(d);
}

static void set_async(comm *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_async(comm *c, int code, const char *fmt, ...) {
	if (c->async_err != 0) {
		return;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
	va_end(ap);
	c->async_err = code;
	log_line("rank %d/%d failed (HcclResult %d, %.1f s after init): %s", c->rank, c->n, code, now_s() - c->since, c->errmsg);
}

// exchange sends d's request and applies the reply (the stream's thread).
static int exchange(desc *d) {
	comm *c = d->c;
	int n = c->n;
	size_t es = esize(d->dtype), blk = d->count * es;
	hdr q = {.type = M_OP, .kind = (uint32_t)d->kind, .dtype = d->dtype, .op = d->op, .rank = (uint32_t)c->rank, .peer = d->peer, .seq = d->seq, .count = d->count};
	int rc;
	if (d->kind == K_ALLTOALLV) {
		size_t total = 2 * n * 8;
		for (int k = 0; k < n; k++) {
			total += d->counts[k] * es;
		}
		char *buf = malloc(total);
		memcpy(buf, d->counts, n * 8);
		memcpy(buf + n * 8, d->counts + 2 * n, n * 8);
		size_t o = 2 * n * 8;
		for (int k = 0; k < n; k++) {
			memcpy(buf + o, d->send + d->counts[n + k] * es, d->counts[k] * es);
			o += d->counts[k] * es;
		}
		rc = send_msg(c->fd, &q, buf, total, NULL, 0);
		free(buf);
	} else {
		size_t nb = 0;
		switch (d->kind) {
		case K_ALLREDUCE: case K_ALLGATHER: case K_SEND: nb = blk; break;
		case K_BROADCAST: nb = c->rank == (int)d->peer ? blk : 0; break;
		case K_REDUCESCATTER: case K_ALLTOALL: nb = blk * n; break;
		}
		rc = send_msg(c->fd, &q, d->send, nb, NULL, 0);
	}
	if (rc) {
		return E_REMOTE;
	}
	double deadline = c->exec_timeout > 0 ? now_s() + c->exec_timeout : 0;
	if ((rc = wait_readable(c->fd, deadline, d->stream, d->aborts)) != 0) {
		return rc;
	}
	hdr r;
	char *pl;
	if (read_msg(c->fd, &r, &pl)) {
		return E_REMOTE;
	}
	if (r.type == M_ERROR) {
		set_async(c, r.code, "%s", pl);
		free(pl);
		return -1;
	}
	size_t want = 0;
	switch (d->kind) {
	case K_ALLREDUCE: case K_REDUCESCATTER: case K_RECV: want = blk; break;
	case K_BROADCAST: want = c->rank == (int)d->peer ? 0 : blk; break;
	case K_ALLGATHER: case K_ALLTOALL: want = blk * n; break;
	case K_ALLTOALLV:
		for (int k = 0; k < n; k++) {
			want += d->counts[2 * n + k] * es;
		}
		break;
	}
	if (r.type != M_RESULT || r.nbytes != want) {
		free(pl);
		set_async(c, E_INTERNAL, "stand-in hccl: rank %d: %s #%llu: a reply of %llu bytes, want %zu", c->rank, kind_name(d->kind),
			  (unsigned long long)d->seq, (unsigned long long)r.nbytes, want);
		return -1;
	}
	if (d->kind == K_ALLTOALLV) {
		size_t o = 0;
		for (int k = 0; k < n; k++) {
			memcpy(d->recv + d->counts[3 * n + k] * es, pl + o, d->counts[2 * n + k] * es);
			o += d->counts[2 * n + k] * es;
		}
	} else if (want > 0) {
		memcpy(d->kind == K_BROADCAST ? (char *)d->send : d->recv, pl, want);
	}
	free(pl);
	return 0;
}

// run_task runs an enqueued operation on the stream's thread. Failures
// go to the communicator's asynchronous error; the stream itself goes on.
static int run_task(void *p) {
	desc *d = p;
	comm *c = d->c;
	pthread_mutex_lock(&c->mu);
	if (c->dead || c->async_err != 0) {
		pthread_mutex_unlock(&c->mu);
		return 0; // HcclGetCommAsyncError keeps reporting the first failure
	}
	c->inflight++;
	pthread_mutex_unlock(&c->mu);
	double start = now_s();
	pthread_mutex_lock(&c->io);
	int rc = exchange(d);
	pthread_mutex_unlock(&c->io);
	pthread_mutex_lock(&c->mu);
	const char *what = kind_name(d->kind);
	switch (rc) {
	case 0: case -1: break;
	case E_TIMEOUT:
		set_async(c, E_TIMEOUT, "stand-in hccl: rank %d/%d: %s #%llu did not complete within the execution timeout (%g s, HCCL_EXEC_TIMEOUT or hcclExecTimeOut): a rank did not join",
			  c->rank, c->n, what, (unsigned long long)d->seq, c->exec_timeout);
		break;
	case E_INTERNAL:
		set_async(c, E_INTERNAL, "stand-in hccl: rank %d/%d: %s #%llu: the stream was aborted after %.1f s", c->rank, c->n, what,
			  (unsigned long long)d->seq, now_s() - start);
		break;
	default:
		set_async(c, E_REMOTE, "stand-in hccl: rank %d/%d: %s #%llu: the connection to the communicator's hub closed (%s)", c->rank, c->n,
			  what, (unsigned long long)d->seq, c->dead ? "the communicator was destroyed" : "the root rank's process exited?");
	}
	if (rc != 0 && rc != -1) {
		// Out of step with the hub: leave, saying why, so the peers fail too.
		if (!c->dead) {
			send_error(c->fd, c->async_err, c->errmsg);
		}
		shutdown(c->fd, SHUT_RDWR);
	}
	c->inflight--;
	pthread_mutex_unlock(&c->mu);
	return 0;
}

// enqueue checks what every call shares and queues d on the stream.
static int enqueue(const char *who, void *pc, void *stream, desc *d, size_t send_bytes, size_t recv_bytes) {
	comm *c = acquire(pc); // the operation's reference (desc_free drops it)
	d->c = c;
	int rc = 0;
	if (c == NULL) {
		rc = standin_violation(E_PTR, "hccl-live-comm", "%s on %p: not a live communicator (destroyed?)", who, pc);
	} else if (standin_stream_ok(stream, who) != 0) {
		rc = E_PARA; // the message is set
	} else if (esize(d->dtype) == 0) {
		rc = standin_violation(E_PARA, "hccl-dtype", "%s: HcclDataType %d is not supported", who, d->dtype);
	} else if ((d->kind == K_ALLREDUCE || d->kind == K_REDUCESCATTER) && !reducible(d->dtype, d->op)) {
		rc = standin_violation(E_PARA, "hccl-reduce-op", "%s: HcclReduceOp %d is not defined on HcclDataType %d", who, d->op, d->dtype);
	} else if ((d->kind == K_BROADCAST || d->kind == K_SEND || d->kind == K_RECV) && d->peer >= (uint32_t)c->n) {
		rc = standin_violation(E_PARA, "hccl-rank-range", "%s: rank %u of a communicator of %d", who, d->peer, c->n);
	} else if ((d->kind == K_SEND || d->kind == K_RECV) && d->peer == (uint32_t)c->rank) {
		rc = standin_violation(E_PARA, "hccl-peer-self", "%s: rank %d names itself as the peer", who, c->rank);
	} else if (d->kind != K_BARRIER && d->kind != K_ALLTOALLV && d->count == 0) {
		rc = standin_violation(E_PARA, "hccl-count", "%s: count 0", who);
	} else if ((send_bytes && !standin_dev_range(d->send, send_bytes)) || (recv_bytes && !standin_dev_range(d->recv, recv_bytes))) {
		rc = standin_violation(E_PTR, "hccl-device-memory", "%s: buffers %p (%zu bytes) and %p (%zu bytes) must lie in device memory (aclrtMalloc)", who,
				       (const void *)d->send, send_bytes, (void *)d->recv, recv_bytes);
	}
	if (rc != 0) {
		desc_free(d);
		return rc;
	}
	d->stream = stream;
	d->aborts = standin_stream_aborts(stream);
	pthread_mutex_lock(&c->mu);
	if (d->kind != K_SEND && d->kind != K_RECV) {
		d->seq = ++c->seq;
	}
	pthread_mutex_unlock(&c->mu);
	return standin_enqueue(stream, run_task, d, desc_free);
}

static desc *mk(int kind, const void *send, void *recv, uint64_t count, int dtype, int op, uint32_t peer) {
	desc *d = calloc(1, sizeof *d);
	*d = (desc){.kind = kind, .send = send, .recv = recv, .count = count, .dtype = dtype, .op = op, .peer = peer};
	return d;
}

static int nranks(void *pc) {
	pthread_mutex_lock(&comms_mu);
	int n = live(pc) ? ((comm *)pc)->n : 1;
	pthread_mutex_unlock(&comms_mu);
	return n;
}

int HcclAllReduce(void *send, void *recv, uint64_t count, int dtype, int op, void *comm, void *stream) {
	size_t b = count * esize(dtype);
	return enqueue("HcclAllReduce", comm, stream, mk(K_ALLREDUCE, send, recv, count, dtype, op, 0), b, b);
}

int HcclBroadcast(void *buf, uint64_t count, int dtype, uint32_t root, void *comm, void *stream) {
	return enqueue("HcclBroadcast", comm, stream, mk(K_BROADCAST, buf, NULL, count, dtype, 0, root), count * esize(dtype), 0);
}

int HcclReduceScatter(void *send, void *recv, uint64_t recv_count, int dtype, int op, void *comm, void *stream) {
	size_t b = recv_count * esize(dtype);
	return enqueue("HcclReduceScatter", comm, stream, mk(K_REDUCESCATTER, send, recv, recv_count, dtype, op, 0), b * nranks(comm), b);
}

int HcclAllGather(void *send, void *recv, uint64_t send_count, int dtype, void *comm, void *stream) {
	size_t b = send_count * esize(dtype);
	return enqueue("HcclAllGather", comm, stream, mk(K_ALLGATHER, send, recv, send_count, dtype, 0, 0), b, b * nranks(comm));
}

int HcclAlltoAll(const void *send, uint64_t send_count, int send_type, const void *recv, uint64_t recv_count, int recv_type, void *comm,
		 void *stream) {
	if (send_count != recv_count || send_type != recv_type) {
		return standin_violation(E_PARA, "hccl-alltoall-args", "HcclAlltoAll: send %llu of type %d, receive %llu of type %d: the stand-in moves equal blocks",
					 (unsigned long long)send_count, send_type, (unsigned long long)recv_count, recv_type);
	}
	size_t b = send_count * esize(send_type) * nranks(comm);
	return enqueue("HcclAlltoAll", comm, stream, mk(K_ALLTOALL, send, (void *)recv, send_count, send_type, 0, 0), b, b);
}

int HcclAlltoAllV(const void *send, const void *send_counts, const void *sdispls, int send_type, const void *recv, const void *recv_counts,
		  const void *rdispls, int recv_type, void *comm, void *stream) {
	if (send_counts == NULL || sdispls == NULL || recv_counts == NULL || rdispls == NULL) {
		return standin_violation(E_PTR, "hccl-non-null", "HcclAlltoAllV: NULL counts or displacements");
	}
	if (send_type != recv_type) {
		return standin_violation(E_PARA, "hccl-alltoall-args", "HcclAlltoAllV: send type %d, receive type %d", send_type, recv_type);
	}
	int n = nranks(comm);
	size_t es = esize(send_type);
	desc *d = mk(K_ALLTOALLV, send, (void *)recv, 0, send_type, 0, 0);
	// The count arrays are host memory the caller may reuse once the call
	// returns: copy them.
	d->counts = malloc(4 * n * sizeof(uint64_t));
	const uint64_t *arr[4] = {send_counts, sdispls, recv_counts, rdispls};
	for (int j = 0; j < 4; j++) {
		memcpy(d->counts + j * n, arr[j], n * sizeof(uint64_t));
	}
	size_t sb = 0, rb = 0;
	for (int k = 0; k < n; k++) {
		size_t se = (d->counts[n + k] + d->counts[k]) * es, re = (d->counts[3 * n + k] + d->counts[2 * n + k]) * es;
		sb = se > sb ? se : sb;
		rb = re > rb ? re : rb;
	}
	// Empty buffers may be any pointer; non-empty ones must hold every segment.
	return enqueue("HcclAlltoAllV", comm, stream, d, sb, rb);
}

int HcclBarrier(void *comm, void *stream) { return enqueue("HcclBarrier", comm, stream, mk(K_BARRIER, NULL, NULL, 0, 4, 0, 0), 0, 0); }

int HcclSend(void *buf, uint64_t count, int dtype, uint32_t peer, void *comm, void *stream) {
	return enqueue("HcclSend", comm, stream, mk(K_SEND, buf, NULL, count, dtype, 0, peer), count * esize(dtype), 0);
}

int HcclRecv(void *buf, uint64_t count, int dtype, uint32_t peer, void *comm, void *stream) {
	return enqueue("HcclRecv", comm, stream, mk(K_RECV, NULL, buf, count, dtype, 0, peer), 0, count * esize(dtype));
}
