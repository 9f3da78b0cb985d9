/*
 * The line shaper (-L): a drop-tail FIFO paced at exact frame times, its shared status page and
 * buffer limit, and the budget that keeps other work out of the way of its departures.
 * Part of bsz-delayline's one translation unit (delayline.c includes it); see delayline.c.
 */
#include "common.h"

static void status_begin(struct line_status *st)
{
	__atomic_store_n(&st->seq, st->seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void status_end(struct line_status *st)
{
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&st->seq, st->seq + 1, __ATOMIC_RELAXED);
}

/* A frame just read from side A into frame buffer buf: queue it (returns 1, the buffer is the
 * line's now) or drop it (returns 0, the caller keeps the buffer). */
static int line_enqueue(struct dir *d, uint64_t t, uint32_t len, uint32_t buf)
{
	struct line_status *st = line.st;
	int queued = 0;
	status_begin(st);
	if (st->backlog_bytes + len > st->limit_bytes || line.count == line.cap) {
		st->drops++;
	} else {
		struct slot *s = &line.ring[(line.head + line.count++) % line.cap];
		*s = (struct slot){.release_ns = t, .seq = d->seq++, .len = len, .buf = buf};
		st->backlog_bytes += len;
		st->backlog_frames++;
		st->enq_frames++;
		st->enq_bytes += len;
		queued = 1;
	}
	status_end(st);
	return queued;
}

/* Take a new limit the toolkit asked for. Like bfifo's, a smaller limit drops nothing queued:
 * arrivals are refused until the backlog is below it. */
static void line_apply_limit(void)
{
	struct line_status *st = line.st;
	uint64_t gen = __atomic_load_n(&st->want_gen, __ATOMIC_ACQUIRE);
	if (gen == st->applied_gen)
		return;
	uint64_t want = __atomic_load_n(&st->want_limit, __ATOMIC_RELAXED);
	status_begin(st);
	if (want > 0)
		st->limit_bytes = want;
	st->applied_gen = gen;
	status_end(st);
}

/* Move every frame whose serialization has started into the delay stage (d's heap, released at
 * its start time plus the host's forward delay); returns the next start time or 0. */
static uint64_t line_release(struct dir *d)
{
	if (!line.on)
		return 0;
	line_apply_limit();
	struct line_status *st = line.st;
	while (line.count) {
		struct slot s = line.ring[line.head];
		uint64_t t = now_ns();
		uint64_t start = s.release_ns > line.free_at_ns ? s.release_ns : line.free_at_ns;
		if (start > t)
			return start;
		status_begin(st);
		if (t - start > line.burst_ns) { /* woken too late to catch up on all of it */
			st->lost_ns += t - start - line.burst_ns;
			start = t - line.burst_ns;
			st->clock_resets++;
		}
		line.head = (line.head + 1) % line.cap;
		line.count--;
		line.free_at_ns = start + (uint64_t)(s.len * line.ns_per_byte);
		st->backlog_bytes -= s.len;
		st->backlog_frames--;
		st->sent_frames++;
		st->sent_bytes += s.len;
		status_end(st);
		s.release_ns = start + delay_for(d, d->frames + (size_t)s.buf * FRAME_MAX, s.len, 1);
		heap_push(d, s);
		if (d->heap_len > d->max_held)
			d->max_held = d->heap_len;
	}
	return 0;
}

/* The next departure of the line: the head of the delay stage when it is paced, or the line's
 * next start plus the smallest delay (with no delay that start is itself the departure). */
static void plan_yield(const struct dir *fwd)
{
	uint64_t at = UINT64_MAX;
	if (fwd->paced && fwd->heap_len)
		at = fwd->heap[0].release_ns;
	if (line.on && line.count) {
		const struct slot *s = &line.ring[line.head];
		uint64_t start = s->release_ns > line.free_at_ns ? s->release_ns : line.free_at_ns;
		if (start + fwd->min_delay_ns < at)
			at = start + fwd->min_delay_ns;
	}
	yield_at_ns = at == UINT64_MAX ? 0 : at;
}

/* How many frames fit in one call before the next departure (most at most; 0: none). */
static uint32_t batch_budget(const struct cost *c, uint32_t most)
{
	if (!yield_at_ns)
		return most;
	uint64_t t = now_ns(), need = YIELD_GUARD_NS + c->call_ns + c->frame_ns;
	if (t - c->last_ns > MAX_DEFER_NS)
		return most;
	if (t + need > yield_at_ns)
		return 0;
	uint64_t n = 1 + (yield_at_ns - t - need) / (c->frame_ns ? c->frame_ns : 1);
	return n < most ? (uint32_t)n : most;
}

static void ewma(uint64_t *avg, uint64_t x)
{
	*avg = (uint64_t)((int64_t)*avg + ((int64_t)x - (int64_t)*avg) / 8);
}

/* A call that moved no frame (an empty socket) or one frame measures the call's own cost; a
 * bigger batch, what each frame adds to it. */
static void note_cost(struct cost *c, uint64_t end_ns, uint64_t elapsed_ns, int frames)
{
	c->last_ns = end_ns;
	if (frames <= 1) {
		ewma(&c->call_ns, elapsed_ns < CALL_CAP_NS ? elapsed_ns : CALL_CAP_NS);
	} else {
		uint64_t per = elapsed_ns > c->call_ns ? (elapsed_ns - c->call_ns) / (uint64_t)(frames - 1) : 0;
		ewma(&c->frame_ns, per < FRAME_CAP_NS ? per : FRAME_CAP_NS);
	}
}

static void line_init(const char *status_path, long slots, double rate_bps, long limit, long burst)
{
	int fd = open(status_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		die(status_path);
	if (ftruncate(fd, 4096) < 0)
		die("ftruncate");
	void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		die("mmap");
	close(fd);
	line.st = m;
	line.on = 1;
	line.cap = (uint32_t)slots;
	line.ring = calloc((size_t)slots, sizeof *line.ring);
	if (!line.ring)
		die("calloc");
	line.ns_per_byte = 8e9 / rate_bps;
	line.burst_ns = (uint64_t)(burst * line.ns_per_byte);
	line.st->limit_bytes = (uint64_t)limit;
	line.st->rate_bps = (uint64_t)rate_bps;
	line.st->burst_bytes = (uint64_t)burst;
	__atomic_store_n(&line.st->magic, LINE_MAGIC, __ATOMIC_RELEASE); /* readers wait for it */
}

/* The VLAN tag the kernel took off (auxdata), or 0 if the frame had none. */
