// emb_shim.cc - the C++ side of emb.h: forwards each C call to Google Benchmark.
// The only C++ in Ember's benchmarks; keep it a shim (no benchmark logic here).

#include "emb.h"

#include <benchmark/benchmark.h>

namespace {

benchmark::State *S(emb_state *st) { return reinterpret_cast<benchmark::State *>(st); }

benchmark::internal::Benchmark *B(emb_bench *b)
{
	return reinterpret_cast<benchmark::internal::Benchmark *>(b);
}

emb_bench *E(benchmark::internal::Benchmark *b) { return reinterpret_cast<emb_bench *>(b); }

} // namespace

extern "C" {

emb_bench *emb_register(const char *name, emb_fn fn)
{
	return E(benchmark::RegisterBenchmark(name, [fn](benchmark::State &st) {
		fn(reinterpret_cast<emb_state *>(&st));
	}));
}

emb_bench *emb_bench_arg(emb_bench *b, int64_t x) { return E(B(b)->Arg(x)); }
emb_bench *emb_bench_arg_name(emb_bench *b, const char *name) { return E(B(b)->ArgName(name)); }
emb_bench *emb_bench_threads(emb_bench *b, int threads) { return E(B(b)->Threads(threads)); }
emb_bench *emb_bench_iterations(emb_bench *b, int64_t n) { return E(B(b)->Iterations(n)); }
emb_bench *emb_bench_min_time(emb_bench *b, double seconds) { return E(B(b)->MinTime(seconds)); }
emb_bench *emb_bench_real_time(emb_bench *b) { return E(B(b)->UseRealTime()); }
emb_bench *emb_bench_unit_us(emb_bench *b) { return E(B(b)->Unit(benchmark::kMicrosecond)); }

void emb_add_context(const char *key, const char *value) { benchmark::AddCustomContext(key, value); }

int emb_main(int argc, char **argv)
{
	benchmark::Initialize(&argc, argv);
	if (benchmark::ReportUnrecognizedArguments(argc, argv))
		return 1;
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	return 0;
}

int emb_state_keep_running(emb_state *st) { return S(st)->KeepRunning(); }
int emb_state_keep_running_batch(emb_state *st, int64_t n) { return S(st)->KeepRunningBatch(n); }
int64_t emb_state_range(emb_state *st, unsigned i) { return S(st)->range(i); }
int64_t emb_state_iterations(emb_state *st) { return S(st)->iterations(); }
int emb_state_thread_index(emb_state *st) { return S(st)->thread_index(); }
int emb_state_threads(emb_state *st) { return S(st)->threads(); }
void emb_state_pause_timing(emb_state *st) { S(st)->PauseTiming(); }
void emb_state_resume_timing(emb_state *st) { S(st)->ResumeTiming(); }
void emb_state_skip_with_error(emb_state *st, const char *msg) { S(st)->SkipWithError(msg); }

void emb_set_items_processed(emb_state *st, int64_t items) { S(st)->SetItemsProcessed(items); }
void emb_set_bytes_processed(emb_state *st, int64_t bytes) { S(st)->SetBytesProcessed(bytes); }

void emb_set_counter(emb_state *st, const char *name, double value, int rate)
{
	S(st)->counters[name] =
		benchmark::Counter(value, rate ? benchmark::Counter::kIsRate : benchmark::Counter::kDefaults);
}

void emb_set_label(emb_state *st, const char *label) { S(st)->SetLabel(label); }

} // extern "C"
