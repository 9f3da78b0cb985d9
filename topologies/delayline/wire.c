/*
 * The two sides' AF_PACKET sockets: opening them, and reading frames in batches into a direction.
 * Part of bsz-delayline's one translation unit (delayline.c includes it); see delayline.c.
 */
#include "common.h"

static int open_side(const char *ifname, int *ifindex)
{
	int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
	if (fd < 0)
		die("socket(AF_PACKET)");
	*ifindex = (int)if_nametoindex(ifname);
	if (*ifindex == 0) {
		fprintf(stderr, "bsz-delayline: no interface %s\n", ifname);
		exit(2);
	}
	struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL), .sll_ifindex = *ifindex};
	if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0)
		die("bind");
	int one = 1, big = 16 << 20;
	/* What we send on this side must not come back to us as input. */
	if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) < 0)
		die("PACKET_IGNORE_OUTGOING");
	/* The kernel strips a frame's outer VLAN tag before packet sockets see it; it comes back as
	 * auxdata and is put back before the frame is sent on (else tagged frames left untagged). */
	if (setsockopt(fd, SOL_PACKET, PACKET_AUXDATA, &one, sizeof one) < 0)
		die("PACKET_AUXDATA");
	/* A large receive buffer absorbs bursts while we are busy sending. */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
	setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
	struct packet_mreq mr = {.mr_ifindex = *ifindex, .mr_type = PACKET_MR_PROMISC};
	if (setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) < 0)
		die("PACKET_MR_PROMISC");
	return fd;
}


static uint32_t stripped_vlan(struct msghdr *msg)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		if (c->cmsg_level != SOL_PACKET || c->cmsg_type != PACKET_AUXDATA)
			continue;
		struct tpacket_auxdata aux;
		memcpy(&aux, CMSG_DATA(c), sizeof aux);
		if (!(aux.tp_status & TP_STATUS_VLAN_VALID))
			return 0;
		uint32_t tpid = aux.tp_status & TP_STATUS_VLAN_TPID_VALID ? aux.tp_vlan_tpid : ETH_P_8021Q;
		return tpid << 16 | aux.tp_vlan_tci;
	}
	return 0;
}

/* Read everything waiting on the input side; returns frames read.
 * One recvmmsg() takes up to RX_BATCH frames: a system call costs about a us on this VM, a good
 * part of a frame's few us of work, and the line's thread also has to make its departures. With
 * it the line (-R 10 Gb/s) carried 275k frames/s on its core without loss where one recvmsg() a
 * frame carried 250k, and at 1.2 x a 1 Gb/s rate it gave up less of its schedule (0.5 % of the
 * time against 0.8 %; bench/results/line-pps.md).
 * Each message gets its own frame buffer, taken off the free stack for the call; those of frames
 * not kept (dropped, or never filled) go back after it. With the pool empty, a batch goes into a
 * scratch buffer only to be counted (MSG_TRUNC still gives each frame's length), as before. */
/* One frame read at time t into buffer `buf` (UINT32_MAX: none was free, so it is counted and
 * dropped): into the line's FIFO or the delay stage's heap. 1 when the buffer is kept there. */
static int take_frame(struct dir *d, int forward, struct mmsghdr *m, uint32_t buf, uint64_t t)
{
	uint32_t r = m->msg_len;
	unsigned char *frame = m->msg_hdr.msg_iov->iov_base;
	d->last_rx_ns = t;
	d->last_rx_len = r;
	d->rx_run_bytes += r;
	d->rx_frames++;
	d->rx_bytes += r;
	if (buf == UINT32_MAX) {
		d->drop_full++;
		return 0;
	}
	uint32_t vlan = stripped_vlan(&m->msg_hdr);
	if ((size_t)r + (vlan ? 4 : 0) > FRAME_MAX) {
		d->drop_oversize++;
		return 0;
	}
	if (vlan && r >= 12) { /* the tag goes back after the MAC addresses */
		memmove(frame + 16, frame + 12, (size_t)r - 12);
		uint32_t be = htonl(vlan);
		memcpy(frame + 12, &be, 4);
		r += 4;
	}
	if (forward && line.on)
		return line_enqueue(d, t, r, buf);
	struct slot s = {.release_ns = t + delay_for(d, frame, r, forward), .seq = d->seq++, .len = r, .buf = buf};
	heap_push(d, s);
	if (d->heap_len > d->max_held)
		d->max_held = d->heap_len;
	return 1;
}

static int drain_input(struct dir *d, int forward)
{
	static unsigned char scratch[64];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(struct tpacket_auxdata))];
	} ctl[RX_BATCH];
	struct iovec iov[RX_BATCH];
	struct mmsghdr mm[RX_BATCH];
	uint32_t bufs[RX_BATCH];
	unsigned char kept[RX_BATCH]; /* 1: the buffer is the line's or the heap's now */
	int n = 0;
	for (;;) {
		/* Input waits in the socket's large buffer while a departure is near. */
		uint32_t most = batch_budget(&d->rx_cost, RX_BATCH);
		if (!most) {
			d->yields++;
			return n;
		}
		/* Never more frames than free buffers: a frame read with a buffer free is never
		 * counted as a pool drop, exactly as when it was read alone. */
		uint32_t have = d->free_len < most ? d->free_len : most;
		unsigned int vlen = have ? have : most;
		uint64_t t0 = now_ns();
		d->free_len -= have;
		for (unsigned int i = 0; i < vlen; i++) {
			if (have) {
				bufs[i] = d->free_bufs[d->free_len + have - 1 - i];
				iov[i] = (struct iovec){.iov_base = d->frames + (size_t)bufs[i] * FRAME_MAX, .iov_len = FRAME_MAX};
			} else {
				iov[i] = (struct iovec){.iov_base = scratch, .iov_len = sizeof scratch};
			}
			/* The kernel rewrites msg_controllen (and msg_flags): set afresh for every call. */
			mm[i].msg_hdr = (struct msghdr){.msg_iov = &iov[i], .msg_iovlen = 1, .msg_control = &ctl[i],
							.msg_controllen = sizeof ctl[i]};
		}
		int got = recvmmsg(d->in_fd, mm, vlen, MSG_DONTWAIT | MSG_TRUNC, NULL);
		int err = got < 0 ? errno : 0;
		if (err && err != EINTR && err != EAGAIN && err != EWOULDBLOCK)
			die("recv");
		/* One clock reading for the batch: every frame in it was waiting by now, none is dated
		 * before it was read (as each was read alone, the time is the read's, not the wire's:
		 * kernel timestamps cannot be had, see the header comment). Frames read earlier in the
		 * call are dated late by at most the call's length, a few us for RX_BATCH frames. For
		 * the line that only matters when it was idle: the first frame of the batch starts then,
		 * the rest queue behind it one frame time apart (start = max(arrival, free_at)), so the
		 * paced departures do not depend on it; for the delay stage it is constant per batch. */
		uint64_t t = now_ns();
		note_cost(&d->rx_cost, t, t - t0, got < 0 ? 0 : got);
		memset(kept, 0, sizeof kept);
		for (int i = 0; i < got; i++, n++)
			kept[i] = (unsigned char)take_frame(d, forward, &mm[i], have ? bufs[i] : UINT32_MAX, t);
		/* The buffers not kept go back, the first message's on top, as they were taken. */
		for (uint32_t i = have; i-- > 0;)
			if (!kept[i])
				d->free_bufs[d->free_len++] = bufs[i];
		if (forward && line.on) /* a frame that found the line idle may leave soon */
			plan_yield(d);
		/* Fewer frames than asked for: the socket is empty (no need to hear EAGAIN again). */
		if (err ? err != EINTR : (unsigned int)got < vlen)
			return n;
	}
}

/* Send every frame whose time has come; returns the next release time or 0.
 * Frames due by the same clock reading leave in one sendmmsg() (TX_BATCH at most): frames read
 * in one batch that have the same delay (acks) are due together, and each send() is a system
 * call of a few us here. Not the line's departures (d->paced): each of those leaves in a send()
 * of its own when its time has come, and its lateness is taken against a clock reading of its
 * own. In a batch, lateness is that of the call's start (later frames leave a few us after). */
