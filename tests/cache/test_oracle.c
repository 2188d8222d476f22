/*
 * test_oracle.c - the plan, checked step by step against a shadow cache.
 *
 * Random small traces (tables, sizes, batch sizes, capacities and rings all
 * random) are linked and planned in a random interleaving (link as far ahead as the
 * ring allows, or plan the next batch). After every step oracle_check() must hold
 * (invariants I1-I5), and every plan must be one the cache can carry out:
 *   - every distinct row of the batch gets a slot < capacity, all different;
 *   - a row the shadow holds is a hit in the same slot; every other row is an
 *     admission whose victim is exactly the shadow's owner of that slot (or none,
 *     for a never-used slot), never a row of the batch itself, with vlast = the
 *     shadow's last use of that slot (< the batch);
 *   - Belady's rule with the window's knowledge: each victim's next use (within
 *     the linked batches; none = infinitely far) is the farthest among the rows
 *     still evictable, and among rows with that next use (none, or one batch) it
 *     is the least recently used (by last use, then index in that batch: LRU's
 *     order, which the proof in docs/cache.md needs);
 *   - half the plans run with pinned rows (last used by a recent batch, as if not
 *     released): then a pinned victim is only taken when every row with no next
 *     use is pinned too (Belady's rule is not checked for those plans).
 * Half the batches are linked from ids (oracle_link_begin/part/end: the dedupe
 * fused into linking): duplicates and parts cut at random, the distinct rows,
 * their order and every lookup's index checked; a quarter of those first try a
 * link that must fail (a row out of range, or one distinct row more than allowed)
 * and abort it, after which the oracle must be as before (oracle_check, and every
 * later plan checked as above).
 * One round in 64 has a table of 2^18 rows or more (the dedupe loop that
 * prefetches the per-row words; smaller tables use the one that does not).
 * The last rounds use batches of hundreds of distinct rows, longer than the
 * distance the plan prefetches ahead, so its prefetching and split admission passes
 * (victims chosen first, per-row state written after) run on long batches too.
 *
 * Then fixed scenarios of the pinned-row rule (oracle.c, "Pinned rows"), where the
 * plan's victim is known exactly: a pinned row with no next use and an unpinned
 * row with one: the unpinned one goes (step 2), though Belady alone would take
 * the other; with nothing pinned, Belady's victim; with both pinned, the one with
 * no next use (step 3).
 */
#include "cache/oracle.h"
#include "ember.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

#define INF UINT32_MAX

struct tb {
	uint32_t n;
	struct urow *u;
	struct onext *next;
	uint32_t *slot;
	struct omiss *miss;
	struct obatch ob; /* linked: the oracle keeps a pointer until the plan */
};

static uint64_t plans, evictions, id_links, aborts;

/*
 * Link batch e from ids (oracle_link_begin/part/end): e->u's rows in order, each
 * followed by random repeats of rows already named, cut into parts at random
 * (several parts may name one table). The distinct rows must come out as e->u, in
 * order; luidx and the ids' copy must match. Sometimes a failing attempt first (a
 * row out of range, or one distinct row too many): EINVAL / ETOOBIG, and the
 * abort must leave the oracle as it was (the plans checked later depend on it).
 */
static void link_ids(struct oracle *o, struct tb *e, const uint64_t *rows, uint32_t ntables,
		     tu_rng *rng)
{
	uint32_t n = e->n, cap = 4 * n + 8, nids = 0;
	uint32_t *tab = malloc(cap * sizeof(uint32_t)), *want = malloc(cap * sizeof(uint32_t));
	uint64_t *id = malloc(cap * sizeof(uint64_t)), *copy = malloc(cap * sizeof(uint64_t));
	uint32_t *luidx = malloc(cap * sizeof(uint32_t));
	struct urow *uniq = malloc((n + 1) * sizeof(struct urow));
	CHECK(tab && want && id && copy && luidx && uniq, "malloc");
	for (uint32_t k = 0; k < n; k++) {
		tab[nids] = e->u[k].table;
		id[nids] = e->u[k].row;
		want[nids++] = k;
		uint32_t reps = (uint32_t)tu_rng_below(rng, 4);
		for (uint32_t j = 0; j < reps && nids < cap; j++) {
			uint32_t x = (uint32_t)tu_rng_below(rng, k + 1);
			tab[nids] = e->u[x].table;
			id[nids] = e->u[x].row;
			want[nids++] = x;
		}
	}
	int fail = n > 0 && tu_rng_chance(rng, 1, 4) ? (int)tu_rng_range(rng, 1, 2) : 0;
	for (int attempt = fail ? 0 : 1; attempt < 2; attempt++) {
		uint32_t bad = attempt == 0 && fail == 1 ? (uint32_t)tu_rng_below(rng, nids) : UINT32_MAX;
		uint64_t saved = bad != UINT32_MAX ? id[bad] : 0;
		if (bad != UINT32_MAX)
			id[bad] = rows[tab[bad]] + tu_rng_below(rng, 3); /* out of range */
		oracle_link_begin(o, &e->ob, uniq, attempt == 0 && fail == 2 ? n - 1 : n);
		int rc = 0;
		for (uint32_t i = 0; i < nids && rc == 0;) {
			uint32_t j = i + 1; /* a part: a run of one table, cut at random */
			while (j < nids && tab[j] == tab[i] && !tu_rng_chance(rng, 1, 8))
				j++;
			CHECK(tab[i] < ntables, "table");
			rc = oracle_link_part(o, &e->ob, tab[i], j - i, id + i, luidx + i, copy + i);
			i = j;
		}
		if (attempt == 0) {
			CHECK(rc == (fail == 1 ? EMBER_EINVAL : EMBER_ETOOBIG),
			      "bad link: rc %d, fail mode %d", rc, fail);
			oracle_link_abort(o, &e->ob);
			CHECK(e->ob.nuniq == 0, "abort keeps rows");
			int crc = oracle_check(o);
			CHECK(crc == 0, "oracle_check after an abort: line %d", -crc);
			if (bad != UINT32_MAX)
				id[bad] = saved;
			aborts++;
			continue;
		}
		CHECK_OK(rc);
		CHECK(e->ob.nuniq == n, "link from ids: %u distinct rows, want %u", e->ob.nuniq, n);
		for (uint32_t k = 0; k < n; k++)
			CHECK(uniq[k].table == e->u[k].table && uniq[k].row == e->u[k].row,
			      "distinct row %u out of order", k);
		for (uint32_t i = 0; i < nids; i++)
			CHECK(luidx[i] == want[i] && copy[i] == id[i], "lookup %u: luidx %u want %u", i,
			      luidx[i], want[i]);
		oracle_link_end(o, &e->ob);
	}
	/* the plan reads uniq[] from the batch: keep the oracle's copy (equal to u) */
	memcpy(e->u, uniq, n * sizeof(struct urow));
	e->ob.uniq = e->u;
	id_links++;
	free(tab);
	free(want);
	free(id);
	free(copy);
	free(luidx);
	free(uniq);
}

/* Plan batch p of b[] and check the plan against the shadow cache. */
static void plan_and_check(struct oracle *o, struct tb *b, uint32_t p, uint32_t pinned,
			   uint32_t linked,
			   const uint64_t *base, uint64_t total, uint64_t cap, uint32_t *owner,
			   uint32_t *lastuse, uint32_t *lastpos, uint32_t *slot_of, uint32_t *inbatch,
			   uint32_t *nu,
			   uint32_t *cand)
{
	/* what the plan may know: next uses within the batches linked */
	for (uint64_t g = 0; g < total; g++)
		nu[g] = INF;
	for (uint32_t q = linked; q-- > p + 1;)
		for (uint32_t k = 0; k < b[q].n; k++)
			nu[base[b[q].u[k].table] + b[q].u[k].row] = q;
	for (uint32_t k = 0; k < b[p].n; k++)
		inbatch[base[b[p].u[k].table] + b[p].u[k].row] = p + 1;
	uint32_t ncand = 0;
	for (uint32_t s = 0; s < cap; s++)
		if (owner[s] != INF && inbatch[owner[s]] != p + 1)
			cand[ncand++] = s;

	oracle_plan(o, &b[p].ob, pinned);
	plans++;
	struct obatch *ob = &b[p].ob;
	CHECK(ob->nmiss <= ob->nuniq, "nmiss");
	/* the admissions, in order: victims by Belady's rule */
	uint32_t m = 0;
	for (uint32_t k = 0; k < ob->nuniq; k++) {
		uint64_t g = base[ob->uniq[k].table] + ob->uniq[k].row;
		uint32_t s = ob->slot[k];
		CHECK(s < cap, "slot %u >= capacity %llu", s, (unsigned long long)cap);
		if (slot_of[g] != INF) {
			CHECK(slot_of[g] == s, "batch %u: a hit moved from slot %u to %u", p,
			      slot_of[g], s);
			continue;
		}
		CHECK(m < ob->nmiss && ob->miss[m].uidx == k, "batch %u: admission %u missing", p, k);
		const struct omiss *mi = &ob->miss[m++];
		CHECK(mi->slot == s, "admission slot");
		if (mi->vlast == ORACLE_NONE) {
			CHECK(owner[s] == INF, "batch %u: slot %u was not empty", p, s);
		} else {
			evictions++;
			uint64_t v = base[mi->vtable] + mi->vrow;
			CHECK(owner[s] == v, "batch %u: victim is not the slot's owner", p);
			CHECK(inbatch[v] != p + 1, "batch %u evicted its own row", p);
			CHECK(mi->vlast == lastuse[s] && mi->vlast < p, "vlast %u, last use %u",
			      mi->vlast, lastuse[s]);
			if (pinned != ORACLE_NONE) {
				if (lastuse[s] >= pinned)
					for (uint32_t i = 0; i < ncand; i++)
						CHECK(cand[i] == INF || nu[owner[cand[i]]] != INF ||
							      lastuse[cand[i]] >= pinned,
						      "batch %u: a pinned victim while an unpinned row "
						      "with no next use was left", p);
				for (uint32_t i = 0; i < ncand; i++)
					if (cand[i] == s)
						cand[i] = INF;
				slot_of[v] = INF;
				owner[s] = (uint32_t)g;
				slot_of[g] = s;
				continue;
			}
			/* the farthest next use among the candidates left; ties (at
			 * "never" or at one batch): the least recently used, by last use
			 * and position in that batch, as LRU orders rows */
			uint32_t best = 0;
			uint64_t lru = UINT64_MAX;
			for (uint32_t i = 0; i < ncand; i++) {
				uint32_t c = cand[i];
				if (c == INF)
					continue;
				uint32_t x = nu[owner[c]];
				if (x > best)
					best = x;
			}
			for (uint32_t i = 0; i < ncand; i++) {
				uint32_t c = cand[i];
				uint64_t rec = c == INF ? 0 : (uint64_t)lastuse[c] << 32 | lastpos[c];
				if (c != INF && nu[owner[c]] == best && rec < lru)
					lru = rec;
			}
			CHECK(nu[v] == best, "batch %u: victim next use %u, farthest %u", p, nu[v],
			      best);
			CHECK(((uint64_t)lastuse[s] << 32 | lastpos[s]) == lru,
			      "batch %u: victim last used %u at %u, not the least recently used of "
			      "those with next use %u", p, lastuse[s], lastpos[s], best);
			for (uint32_t i = 0; i < ncand; i++)
				if (cand[i] == s)
					cand[i] = INF;
			slot_of[v] = INF;
		}
		owner[s] = (uint32_t)g;
		slot_of[g] = s;
	}
	CHECK(m == ob->nmiss, "extra admissions");
	for (uint32_t k = 0; k < ob->nuniq; k++) {
		for (uint32_t j = 0; j < k; j++)
			CHECK(ob->slot[j] != ob->slot[k], "two rows of batch %u in one slot", p);
		lastuse[ob->slot[k]] = p;
		lastpos[ob->slot[k]] = k;
	}
}

/*
 * Capacity 2, rows A=10, B=11, C=12, D=13 of one table; batches 0: {B}, 1: {A},
 * 2: {C}, 3: {B} (D only in the last scenario), all linked before any plan.
 * Batches 0 and 1 are planned with nothing pinned (two admissions into empty
 * slots); batch 2 then needs a victim among A (last use 1, no next use) and B
 * (last use 0, next use 3), planned with `pinned`: rows last used by batch
 * `pinned` or later are pinned. Returns the victim's row.
 */
static uint64_t pinned_victim(uint32_t pinned, int b_in_batch1)
{
	uint64_t rows = 16;
	struct oracle *o = NULL;
	CHECK_OK(oracle_create(&o, 1, &rows, 2, 8));
	struct urow u[4][2] = {{{0, 0, 11}}, {{0, 0, 10}, {0, 0, 11}}, {{0, 0, 12}}, {{0, 0, 11}}};
	uint32_t n[4] = {1, b_in_batch1 ? 2 : 1, 1, 1};
	struct onext next[4][2];
	uint32_t slot[4][2];
	struct omiss miss[4][2];
	struct obatch ob[4];
	for (uint32_t i = 0; i < 4; i++) {
		ob[i] = (struct obatch){.seq = i, .nuniq = n[i], .uniq = u[i], .next = next[i],
					.slot = slot[i], .miss = miss[i]};
		oracle_link(o, &ob[i]);
	}
	oracle_plan(o, &ob[0], ORACLE_NONE);
	oracle_plan(o, &ob[1], ORACLE_NONE);
	CHECK(oracle_resident(o) == 2, "two rows resident, got %llu",
	      (unsigned long long)oracle_resident(o));
	oracle_plan(o, &ob[2], pinned);
	int crc = oracle_check(o);
	CHECK(crc == 0, "oracle_check: line %d", -crc);
	CHECK(ob[2].nmiss == 1 && ob[2].miss[0].vlast != ORACLE_NONE, "batch 2: one eviction, "
	      "got %u admissions", ob[2].nmiss);
	uint64_t v = ob[2].miss[0].vrow;
	oracle_destroy(o);
	return v;
}

static void pinned_scenarios(void)
{
	/* A pinned (batch 1 unreleased), B not: B goes, though its next use is known */
	uint64_t v = pinned_victim(1, 0);
	CHECK(v == 11, "pinned A (no next use) and unpinned B (next use 3): the plan evicted "
	      "row %llu, want the unpinned B (11)", (unsigned long long)v);
	/* nothing pinned: Belady's victim, A (no next use) */
	v = pinned_victim(ORACLE_NONE, 0);
	CHECK(v == 10, "nothing pinned: evicted row %llu, want A (10), no next use",
	      (unsigned long long)v);
	/* batches 0 and 1 released (pinned = 2): A and B unpinned: Belady's A */
	v = pinned_victim(2, 0);
	CHECK(v == 10, "nothing pinned (pinned = 2): evicted row %llu, want A (10)",
	      (unsigned long long)v);
	/* both pinned (B used by batch 1 too): the one with no next use, A (step 3) */
	v = pinned_victim(1, 1);
	CHECK(v == 10, "A and B both pinned: evicted row %llu, want A (10), no next use",
	      (unsigned long long)v);
	printf("pinned scenarios: ok\n");
}

int main(int argc, char **argv)
{
	tu_init("cache_oracle", argc, argv);
	pinned_scenarios();
	tu_rng *rng = tu_rng_global();
	uint64_t rounds = tu_scaled(1500), big_rounds = tu_scaled(200);
	for (uint64_t round = 0; round < rounds + big_rounds; round++) {
		/* the last rounds are big: batches of hundreds of rows, so the plan's
		 * prefetching walks (PF_AHEAD rows ahead) and the split admission passes
		 * run over long batches with many misses */
		int big = round >= rounds;
		int huge = round % 64 == 5; /* one table of 2^18 rows or more */
		uint32_t ntables = (uint32_t)tu_rng_range(rng, 1, 4);
		uint64_t rows[4], base[4], total = 0;
		for (uint32_t t = 0; t < ntables; t++) {
			rows[t] = tu_rng_range(rng, 1, big ? 1500 : 200);
			if (huge && t == 0) /* the id loop that prefetches (PF_MIN_ROWS) */
				rows[t] = ((uint64_t)1 << 18) + tu_rng_below(rng, 5000);
			base[t] = total;
			total += rows[t];
		}
		uint32_t nb = (uint32_t)tu_rng_range(rng, 1, big ? 40 : 120);
		uint32_t maxlook = (uint32_t)tu_rng_range(rng, 1, big ? 600 : 40);
		struct tb *b = calloc(nb, sizeof(*b));
		uint32_t *stamp = calloc(total, sizeof(uint32_t));
		CHECK(b && stamp, "calloc");
		uint32_t max_uniq = 1;
		/* skewed ids: squaring a uniform draw favours small rows */
		for (uint32_t i = 0; i < nb; i++) {
			uint32_t look = (uint32_t)tu_rng_range(rng, 0, maxlook);
			b[i].u = calloc(look + 1, sizeof(struct urow));
			b[i].next = calloc(look + 1, sizeof(struct onext));
			b[i].slot = calloc(look + 1, sizeof(uint32_t));
			b[i].miss = calloc(look + 1, sizeof(struct omiss));
			CHECK(b[i].u && b[i].next && b[i].slot && b[i].miss, "calloc");
			for (uint32_t k = 0; k < look; k++) {
				uint32_t t = (uint32_t)tu_rng_below(rng, ntables);
				uint64_t x = tu_rng_below(rng, rows[t]);
				uint64_t r = x * x / rows[t];
				if (stamp[base[t] + r] == i + 1)
					continue;
				stamp[base[t] + r] = i + 1;
				b[i].u[b[i].n++] = (struct urow){.table = t, .row = r};
			}
			if (b[i].n > max_uniq)
				max_uniq = b[i].n;
		}
		/* half the rounds tight (many evictions), half anything up to all rows */
		uint64_t cap = max_uniq + tu_rng_below(rng, tu_rng_chance(rng, 1, 2) ? total / 8 + 1
									   : total + 1);
		uint32_t ring = (uint32_t)tu_rng_range(rng, 1, nb + 2);
		struct oracle *o = NULL;
		CHECK_OK(oracle_create(&o, ntables, rows, cap, ring));

		/* shadow cache */
		uint32_t *owner = malloc(cap * sizeof(uint32_t)); /* global row or INF */
		uint32_t *lastuse = malloc(cap * sizeof(uint32_t));
		uint32_t *lastpos = malloc(cap * sizeof(uint32_t)); /* index in that batch */
		uint32_t *slot_of = malloc(total * sizeof(uint32_t));
		uint32_t *inbatch = calloc(total, sizeof(uint32_t));
		uint32_t *nu = malloc(total * sizeof(uint32_t));   /* next use, this plan */
		uint32_t *cand = malloc(cap * sizeof(uint32_t));
		CHECK(owner && lastuse && lastpos && slot_of && inbatch && nu && cand, "malloc");
		memset(owner, 0xff, cap * sizeof(uint32_t));
		memset(slot_of, 0xff, total * sizeof(uint32_t));
		uint32_t linked = 0, planned = 0;
		while (planned < nb) {
			int can_link = linked < nb && linked - planned < ring;
			if (can_link && (planned == linked || tu_rng_chance(rng, 2, 3))) {
				b[linked].ob = (struct obatch){.seq = linked, .nuniq = b[linked].n,
							       .uniq = b[linked].u,
							       .next = b[linked].next,
							       .slot = b[linked].slot,
							       .miss = b[linked].miss};
				if (tu_rng_chance(rng, 1, 2))
					oracle_link(o, &b[linked].ob);
				else
					link_ids(o, &b[linked], rows, ntables, rng);
				linked++;
			} else {
				uint32_t pin = tu_rng_chance(rng, 1, 2) ? ORACLE_NONE
						: planned - (uint32_t)tu_rng_below(rng, planned < 4 ? planned + 1 : 4);
				plan_and_check(o, b, planned, pin, linked, base, total, cap, owner,
					       lastuse, lastpos, slot_of, inbatch, nu, cand);
				planned++;
			}
			int rc = oracle_check(o);
			CHECK(rc == 0, "oracle_check failed at line %d (linked %u planned %u)", -rc,
			      linked, planned);
			CHECK(oracle_planned(o) == planned && oracle_linked(o) == linked, "counts");
			uint64_t used = 0;
			for (uint64_t s = 0; s < cap; s++)
				used += owner[s] != INF;
			CHECK(oracle_resident(o) == used && used <= cap, "resident");
		}
		oracle_destroy(o);
		for (uint32_t i = 0; i < nb; i++) {
			free(b[i].u);
			free(b[i].next);
			free(b[i].slot);
			free(b[i].miss);
		}
		free(b);
		free(stamp);
		free(owner);
		free(lastuse);
		free(lastpos);
		free(slot_of);
		free(inbatch);
		free(nu);
		free(cand);
	}
	/* bad input of oracle_create */
	{
		struct oracle *o = NULL;
		uint64_t r1[1] = {10}, r0[1] = {0}, rbig[1] = {((uint64_t)1 << 48) + 1};
		uint64_t rmax[1] = {(uint64_t)1 << 48};
		CHECK_RC(oracle_create(NULL, 1, r1, 4, 4), EMBER_EINVAL);
		CHECK_RC(oracle_create(&o, 0, r1, 4, 4), EMBER_EINVAL);
		CHECK_RC(oracle_create(&o, 65536, r1, 4, 4), EMBER_EINVAL);
		CHECK_RC(oracle_create(&o, 1, NULL, 4, 4), EMBER_EINVAL);
		CHECK_RC(oracle_create(&o, 1, r0, 4, 4), EMBER_EINVAL);
		CHECK_RC(oracle_create(&o, 1, rbig, 4, 4), EMBER_EINVAL);
		CHECK_RC(oracle_create(&o, 1, r1, 0, 4), EMBER_EINVAL);
		CHECK_RC(oracle_create(&o, 1, r1, (uint64_t)ORACLE_MAX_BATCHES + 1, 4), EMBER_EINVAL);
		CHECK_RC(oracle_create(&o, 1, r1, 4, 0), EMBER_EINVAL);
		CHECK(o == NULL, "a failed create set its result");
		/* 2^48 rows: accepted (the words are mapped lazily: 2 PiB would not be;
		 * ENOMEM is the answer there, or success where overcommit allows) */
		int rc = oracle_create(&o, 1, rmax, 4, 4);
		CHECK(rc == 0 || rc == EMBER_ENOMEM, "2^48 rows: rc %d", rc);
		oracle_destroy(o);
		oracle_destroy(NULL);
	}
	printf("cache_oracle: %llu rounds (%llu big), %llu plans, %llu evictions checked; %llu "
	       "batches linked from ids, %llu failed links aborted\n",
	       (unsigned long long)(rounds + big_rounds), (unsigned long long)big_rounds,
	       (unsigned long long)plans, (unsigned long long)evictions,
	       (unsigned long long)id_links, (unsigned long long)aborts);
	return 0;
}
