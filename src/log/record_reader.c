/*
 * record_reader.c - rec_check and the readers built on it (record_reader.h).
 */
#include "log/record_reader.h"

#include <ember.h>

#include "core/alloc.h"

static int64_t bad(const char **why, const char *what)
{
	if (why)
		*why = what;
	return EMBER_ECORRUPT;
}

static uint64_t lap_left(const struct hlog *l, uint64_t a)
{
	return l->mem_size - (l->mem_mask ? (a & l->mem_mask) : (a % l->mem_size));
}

/* R2 for a filler at a. */
static int64_t filler_check(struct record *r, uint64_t a, uint64_t hdr, uint32_t vlen,
			    const struct rec_rules *ru, const char **why)
{
	if (!ru->fillers)
		return bad(why, "a filler where a record was expected");
	if (!(hdr & REC_INVALID) || (hdr & (REC_TOMBSTONE | EM_ADDR_MASK)) || r->key_len || vlen ||
	    (r->val_cap & 7))
		return bad(why, "malformed filler");
	uint64_t left = lap_left(ru->log, a);
	if (REC_HDR_SIZE + (uint64_t)r->val_cap != left)
		return bad(why, "a filler that does not end at the end of its lap");
	if (ru->end && a + left > ru->end)
		return bad(why, "a filler that runs past the end of the log");
	return 0;
}

/* R1-R5: the header alone (REC_HDR_SIZE bytes readable). */
static int64_t header_check(struct record *r, uint64_t a, const struct rec_rules *ru,
			    const char **why)
{
	uint64_t hdr = rec_header(r);
	uint32_t vlen = atomic_load_explicit(&r->val_len, memory_order_relaxed); /* see header */
	if (hdr & REC_RESERVED_BITS)
		return bad(why, "reserved header bits are set");
	if (r->reserved != 0)
		return bad(why, "the reserved field is not zero");
	if (hdr & REC_FILLER)
		return filler_check(r, a, hdr, vlen, ru, why);
	if (r->key_len == 0 || r->key_len > EMBER_MAX_KEY_LEN)
		return bad(why, "key length out of range");
	if (r->val_cap & 7)
		return bad(why, "value capacity is not a multiple of 8");
	if (r->val_cap > ru->max_cap)
		return bad(why, "value capacity larger than the largest record");
	if (vlen > r->val_cap)
		return bad(why, "value length larger than its capacity");
	uint64_t size = rec_total_size(r);
	if (ru->log && size > lap_left(ru->log, a))
		return bad(why, "a record that crosses the end of a lap");
	if (ru->end && a + size > ru->end)
		return bad(why, "a record that runs past the end of the log");
	uint64_t prev = hdr & EM_ADDR_MASK;
	if (prev >= a || (prev && prev < EM_LOG_START))
		return bad(why, "a chain link that does not point to an older record");
	return 0;
}

int64_t rec_check_head(struct record *r, uint64_t a, uint64_t avail,
		       const struct rec_rules *rules, const char **why)
{
	if (avail < REC_HDR_SIZE)
		return REC_HDR_SIZE;
	int64_t v = header_check(r, a, rules, why);
	if (v < 0 || (rec_header(r) & REC_FILLER) || !rules->key)
		return v;
	if (avail < REC_HDR_SIZE + (uint64_t)r->key_len)
		return (int64_t)(REC_HDR_SIZE + r->key_len);
	if (!rec_key_eq(r, rules->key, rules->klen))
		return bad(why, "a record of another key");
	return 0;
}

int64_t rec_check_copy(struct record *r, uint64_t a, uint64_t avail,
		       const struct rec_rules *rules, void *dst, size_t dcap, int *copied,
		       const char **why)
{
	int64_t v = rec_check_head(r, a, avail, rules, why);
	if (v != 0)
		return v;
	uint64_t size = rec_total_size(r);
	if (avail < size)
		return (int64_t)size;
	if (rules->in_ring)
		return 0;
	int c = rec_checksum_copy(r, dst, dst ? dcap : 0);
	if (c < 0)
		return bad(why, "checksum mismatch");
	if (copied)
		*copied = c > 0;
	return 0;
}

int64_t rec_check(struct record *r, uint64_t a, uint64_t avail, const struct rec_rules *rules,
		  const char **why)
{
	return rec_check_copy(r, a, avail, rules, NULL, 0, NULL, why);
}

int rec_read_at(rec_read_fn read, void *ctx, uint32_t align, uint8_t **buf, size_t *cap,
		uint64_t a, uint64_t first, const struct rec_rules *rules, struct record **out,
		const char **why)
{
	if (align < EM_READ_ALIGN_MIN || align > EM_IO_ALIGN || (align & (align - 1))) {
		if (why)
			*why = "read alignment out of range"; /* a caller's bug, not the file's */
		return EMBER_EINVAL;
	}
	uint64_t want = first;
	for (int attempt = 0; attempt < 2; attempt++) {
		uint64_t off = em_align_down(a, align);
		uint64_t len = em_align_up(a + want - off, align);
		if (len > UINT32_MAX - EM_IO_ALIGN)
			return (int)bad(why, "record length out of range");
		int rc = em_buf_reserve(buf, cap, len);
		if (rc < 0)
			return rc;
		int res = read(ctx, *buf, (uint32_t)len, off);
		if (res < 0)
			return res;
		uint64_t pos = a - off;
		struct record *r = (struct record *)(void *)(*buf + pos);
		uint64_t avail = (uint64_t)res > pos ? (uint64_t)res - pos : 0;
		int64_t v = rec_check(r, a, avail, rules, why);
		if (v < 0)
			return (int)v;
		if (v == 0) {
			*out = r;
			return 0;
		}
		if ((uint64_t)res < len)
			break; /* a short read: the file ends inside the record */
		want = (uint64_t)v;
	}
	return (int)bad(why, "the file ends inside the record");
}

void rec_cursor_init(struct rec_cursor *c, const struct rec_rules *rules, rec_read_fn read,
		     void *ctx, uint64_t window, int track_flushed)
{
	*c = (struct rec_cursor){.rules = *rules, .read = read, .ctx = ctx, .window = window,
				 .track_flushed = track_flushed, .next_want = window};
}

void rec_cursor_free(struct rec_cursor *c)
{
	em_free(c->buf, c->cap);
	c->buf = NULL;
	c->cap = 0;
	c->len = 0;
}

/* Read file bytes from x (at least want of them) into the window. */
static int cursor_fill(struct rec_cursor *c, uint64_t x, uint64_t want)
{
	uint64_t off = em_align_down(x, EM_IO_ALIGN);
	uint64_t len = em_align_up(x + want - off, EM_IO_ALIGN);
	if (len > UINT32_MAX - EM_IO_ALIGN) {
		c->why = "record length out of range";
		return EMBER_ECORRUPT;
	}
	int rc = em_buf_reserve(&c->buf, &c->cap, len);
	if (rc < 0)
		return rc;
	/* the bound before the read: every byte below it is final in the file */
	uint64_t trusted = c->track_flushed ? hlog_load(&c->rules.log->flushed) : c->rules.end;
	int res = c->read(c->ctx, c->buf, (uint32_t)len, off);
	if (res < 0) {
		c->len = 0;
		return res;
	}
	c->off = off;
	c->len = (uint64_t)res;
	c->trusted = trusted;
	return 0;
}

/* The window's bytes from x that may be trusted (0: x is not in it). */
static uint64_t cursor_avail(const struct rec_cursor *c, uint64_t x)
{
	uint64_t wend = c->off + c->len < c->trusted ? c->off + c->len : c->trusted;
	return x >= c->off && x < wend ? wend - x : 0;
}

int rec_cursor_get(struct rec_cursor *c, uint64_t a, int may_move, struct record **out,
		   int *head_only)
{
	*head_only = 0;
	for (int tries = 0;; tries++) {
		uint64_t need = REC_HDR_SIZE, avail = cursor_avail(c, a);
		if (avail) {
			struct record *r = (struct record *)(void *)(c->buf + (a - c->off));
			struct rec_rules ru = c->rules;
			ru.end = c->trusted;
			int64_t v;
			int head = c->head_min && avail >= REC_HDR_SIZE &&
				   !(rec_header(r) & REC_FILLER) && rec_total_size(r) >= c->head_min;
			v = head ? rec_check_head(r, a, avail, &ru, &c->why)
				 : rec_check(r, a, avail, &ru, &c->why);
			if (head && v == 0 && avail < rec_head_size(r))
				v = (int64_t)rec_head_size(r); /* the key too: the caller hashes it */
			if (v < 0)
				return (int)v;
			if (v == 0) {
				if (head)
					c->next_want = c->head_read;
				*head_only = head;
				*out = r;
				return REC_CUR_GOT;
			}
			need = (uint64_t)v;
		}
		if (tries >= 2) {
			c->why = "the file ends inside the record";
			return EMBER_ECORRUPT;
		}
		if (!may_move)
			return REC_CUR_MOVE;
		/* after a record taken by its head read a little, then twice as much
		 * each time: the values of large records after small ones stay unread */
		uint64_t want = c->next_want;
		if (need + EM_IO_ALIGN > want)
			want = need + EM_IO_ALIGN;
		c->next_want = c->next_want * 2 < c->window ? c->next_want * 2 : c->window;
		int rc = cursor_fill(c, a, want);
		if (rc < 0)
			return rc;
	}
}

int rec_cursor_resync(struct rec_cursor *c, uint64_t a, uint64_t limit, uint64_t *next)
{
	struct rec_rules ru = c->rules;
	for (uint64_t p = a + 8;; p += 8) {
		p = hlog_skip_gap(c->rules.log, p);
		if (p >= limit)
			break;
		uint64_t avail = cursor_avail(c, p);
		if (avail < REC_HDR_SIZE) {
			int rc = cursor_fill(c, p, c->window);
			if (rc < 0)
				return rc;
			avail = cursor_avail(c, p);
			if (avail < REC_HDR_SIZE)
				break; /* the file ends before limit */
		}
		ru.end = c->trusted;
		struct record *r = (struct record *)(void *)(c->buf + (p - c->off));
		int64_t v = rec_check(r, p, avail, &ru, NULL);
		if (v > 0) {
			int rc = cursor_fill(c, p, (uint64_t)v);
			if (rc < 0)
				return rc;
			ru.end = c->trusted;
			r = (struct record *)(void *)(c->buf + (p - c->off));
			v = rec_check(r, p, cursor_avail(c, p), &ru, NULL);
		}
		if (v == 0) {
			*next = p;
			return 0;
		}
	}
	*next = limit;
	return 0;
}
