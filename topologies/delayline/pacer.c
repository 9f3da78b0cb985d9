/*
 * The pacer (-k): kick frames that make the kernel's shaper release each frame on time.
 * Part of bsz-delayline's one translation unit (delayline.c includes it); see delayline.c.
 */
#include "common.h"

static void pacer_observe(struct pacer *p, struct dir *d)
{
	if (p->fd < 0 || d->last_rx_ns <= p->seen_ns)
		return;
	p->seen_ns = d->last_rx_ns;
	uint64_t due = d->last_rx_ns + (uint64_t)(d->last_rx_len * p->ns_per_byte);
	p->next_ns = due - PROBE_EARLY_NS;
	p->until_ns = due + PROBE_LATE_NS;
	d->rx_run_bytes = 0;
}

/* Kick if due; returns the next kick time, or 0 if none is planned. */
static uint64_t pacer_run(struct pacer *p, struct dir *fwd)
{
	static const unsigned char kick[60] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0, 0x88, 0xb5};
	if (p->fd < 0 || pacing_off || !p->next_ns)
		return 0;
	uint64_t t = now_ns();
	if (t < p->next_ns)
		return p->next_ns;
	/* Frames that left before this kick are someone else's departures. */
	drain_input(fwd, 1);
	pacer_observe(p, fwd);
	if (t < p->next_ns)
		return p->next_ns;
	uint64_t due = p->next_ns, on_grid = p->until_ns == due + GRID_SLACK_NS;
	p->kicks++;
	if (send(p->fd, kick, sizeof kick, MSG_DONTWAIT) < 0) {
		p->send_errors++;
		p->last_errno = errno;
	}
	/* A frame the kick released went through the veth to side A inside send(). */
	fwd->rx_run_bytes = 0;
	drain_input(fwd, 1);
	if (fwd->rx_run_bytes) {
		uint64_t late = t - due;
		p->hits++;
		if (on_grid) {
			p->grid_hits++;
			p->late_sum_ns += late;
			if (late > p->late_max_ns)
				p->late_max_ns = late;
		}
		p->seen_ns = fwd->last_rx_ns;
		/* The shaper keeps the tokens of our lateness, so the next frame is due one frame time
		 * after this one was due; far behind (preempted), start again from now. */
		uint64_t step = (uint64_t)(fwd->rx_run_bytes * p->ns_per_byte);
		p->next_ns = (on_grid && late < step / 2 ? due : t) + step;
		p->until_ns = p->next_ns + GRID_SLACK_NS;
		fwd->rx_run_bytes = 0;
	} else {
		p->next_ns = t + PROBE_NS <= p->until_ns ? t + PROBE_NS : 0;
	}
	return p->next_ns;
}
