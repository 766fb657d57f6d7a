// image_bench: what a write block image costs to fill, fresh or reused.
//
// A worker fills one write block image (1 MiB by default) per block it
// writes. A fresh anonymous mapping faults each page in on first touch; a
// reused one is zeroed and written while resident. BlockWriter keeps one
// finished image as a spare because on a virtual machine the first is far
// dearer (bench/RESULTS.md, "spare images"); this measures it on the machine
// at hand:
//
//   ./build/bench/image_bench                     (1 MiB blocks)
//   ./build/bench/image_bench --block-kib 4096
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "storage/block_table.h"

namespace {

uint32_t g_block_bytes = 1u << 20;
constexpr size_t kPage = 4096;

// Writes one byte a page, as appends reach each page of the block.
void TouchEveryPage(segstore::storage::BlockImage& image) {
  for (size_t at = 0; at < image.size(); at += kPage) image.data()[at] = 1;
  benchmark::DoNotOptimize(image.data());
}

// A new mapping for every block, unmapped after: one page fault a page.
void BM_FreshImage(benchmark::State& state) {
  for (auto _ : state) {
    segstore::storage::BlockImage image(g_block_bytes);
    TouchEveryPage(image);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * g_block_bytes);
}
BENCHMARK(BM_FreshImage)->Unit(benchmark::kMicrosecond);

// One image reused: zeroed in full, then written; its pages stay resident.
void BM_ReusedImage(benchmark::State& state) {
  segstore::storage::BlockImage image(g_block_bytes);
  TouchEveryPage(image);
  for (auto _ : state) {
    std::memset(image.data(), 0, image.size());
    TouchEveryPage(image);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * g_block_bytes);
}
BENCHMARK(BM_ReusedImage)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  // --block-kib N (ours) is taken out before Google Benchmark sees the flags.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--block-kib" && i + 1 < argc) {
      const long kib = std::strtol(argv[++i], nullptr, 10);
      if (kib < 4 || kib > (1 << 20)) {
        std::fprintf(stderr, "image_bench: --block-kib must be 4 to 1048576\n");
        return 2;
      }
      g_block_bytes = static_cast<uint32_t>(kib) * 1024;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
