/*
 * The delay line: each direction's min-heap of held frames, the delay a frame gets, and releasing
 * the frames that are due.
 * Part of bsz-delayline's one translation unit (delayline.c includes it); see delayline.c.
 */
#include "common.h"

static int slot_less(const struct slot *a, const struct slot *b)
{
	return a->release_ns < b->release_ns || (a->release_ns == b->release_ns && a->seq < b->seq);
}

static void heap_push(struct dir *d, struct slot s)
{
	uint32_t i = d->heap_len++;
	while (i > 0) {
		uint32_t p = (i - 1) / 2;
		if (!slot_less(&s, &d->heap[p]))
			break;
		d->heap[i] = d->heap[p];
		i = p;
	}
	d->heap[i] = s;
}

static void heap_pop(struct dir *d)
{
	struct slot last = d->heap[--d->heap_len];
	uint32_t i = 0, n = d->heap_len;
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && slot_less(&d->heap[c + 1], &d->heap[c]))
			c++;
		if (!slot_less(&d->heap[c], &last))
			break;
		d->heap[i] = d->heap[c];
		i = c;
	}
	if (n)
		d->heap[i] = last;
}

static void dir_free(struct dir *d)
{
	free(d->heap);
	free(d->free_bufs);
	free(d->frames);
}

static void dir_init(struct dir *d, const char *name, uint32_t cap, int key_offset, uint64_t default_ns)
{
	d->name = name;
	d->cap = cap;
	d->key_offset = key_offset;
	d->default_ns = default_ns;
	d->min_delay_ns = default_ns;
	d->rx_cost = d->tx_cost = (struct cost){COST_START_NS, COST_START_NS, 0};
	d->heap = calloc(cap, sizeof *d->heap);
	d->free_bufs = calloc(cap, sizeof *d->free_bufs);
	d->frames = calloc(cap, FRAME_MAX); /* untouched pages cost no memory */
	if (!d->heap || !d->free_bufs || !d->frames)
		die("calloc");
	for (uint32_t i = 0; i < cap; i++)
		d->free_bufs[i] = cap - 1 - i;
	d->free_len = cap;
}

static uint64_t delay_for(const struct dir *d, const unsigned char *frame, uint32_t len, int forward)
{
	if (len < 14)
		return d->default_ns;
	uint32_t l3 = 14, type = (uint32_t)frame[12] << 8 | frame[13];
	/* Look through up to two VLAN tags (802.1Q, QinQ) for the IPv4 header. */
	for (int tags = 0; tags < 2 && (type == ETH_P_8021Q || type == ETH_P_8021AD) && l3 + 4 <= len; tags++) {
		type = (uint32_t)frame[l3 + 2] << 8 | frame[l3 + 3];
		l3 += 4;
	}
	if (type == ETH_P_IP && len >= l3 + 20) {
		uint32_t ip;
		memcpy(&ip, frame + l3 + d->key_offset, 4);
		const struct map_entry *e = map_find(ip, 0);
		if (e)
			return forward ? e->fwd_ns : e->rev_ns;
	}
	return d->default_ns;
}

/* Counter updates under the sequence lock, so a reader never sees half of one. */

static uint64_t release_due(struct dir *d)
{
	struct slot due[TX_BATCH];
	struct iovec iov[TX_BATCH];
	struct mmsghdr mm[TX_BATCH];
	uint32_t most = d->paced ? 1 : TX_BATCH;
	while (d->heap_len) {
		uint64_t t = now_ns();
		if (d->heap[0].release_ns > t)
			return d->heap[0].release_ns;
		uint32_t cap = most;
		if (!d->paced && !(cap = batch_budget(&d->tx_cost, most))) {
			d->yields++;
			return t; /* due now: after the departure */
		}
		uint32_t n = 0;
		while (n < cap && d->heap_len && d->heap[0].release_ns <= t) {
			due[n] = d->heap[0];
			heap_pop(d);
			iov[n] = (struct iovec){.iov_base = d->frames + (size_t)due[n].buf * FRAME_MAX, .iov_len = due[n].len};
			mm[n].msg_hdr = (struct msghdr){.msg_iov = &iov[n], .msg_iovlen = 1};
			n++;
		}
		for (uint32_t i = 0; i < n;) {
			int w;
			uint64_t t0 = now_ns();
			if (n - i == 1)
				w = send(d->out_fd, iov[i].iov_base, iov[i].iov_len, 0) < 0 ? -1 : 1;
			else
				w = sendmmsg(d->out_fd, mm + i, n - i, 0);
			if (w > 0) {
				uint64_t t1 = now_ns();
				note_cost(&d->tx_cost, t1, t1 - t0, w);
			}
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				/* This frame was refused. (sendmmsg reports an error after the first frame
				 * only by sending fewer: the frame it stopped at is tried again on its own.) */
				d->drop_send++;
				d->free_bufs[d->free_len++] = due[i++].buf;
				continue;
			}
			for (int k = 0; k < w; k++, i++) {
				d->tx_frames++;
				d->tx_bytes += due[i].len;
				uint64_t late = t - due[i].release_ns;
				d->late_sum_ns += late;
				if (late > d->late_max_ns)
					d->late_max_ns = late;
				uint64_t b = late / 1000;
				d->late_hist[b < LATE_BUCKETS ? b : LATE_BUCKETS - 1]++;
				d->free_bufs[d->free_len++] = due[i].buf;
			}
		}
	}
	return 0;
}

static void read_kernel_drops(struct dir *d)
{
	struct tpacket_stats st;
	socklen_t len = sizeof st;
	/* Reading PACKET_STATISTICS resets the kernel's counters, so accumulate. */
	if (getsockopt(d->in_fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0)
		d->drop_kernel += st.tp_drops;
}

/* Lateness quantile in us from the histogram (upper edge of the bucket), -1 if nothing sent. */
static double late_quantile(const struct dir *d, double q)
{
	uint64_t total = 0, acc = 0;
	for (int i = 0; i < LATE_BUCKETS; i++)
		total += d->late_hist[i];
	if (!total)
		return -1;
	for (int i = 0; i < LATE_BUCKETS; i++) {
		acc += d->late_hist[i];
		if ((double)acc >= q * (double)total)
			return i + 1;
	}
	return LATE_BUCKETS;
}
