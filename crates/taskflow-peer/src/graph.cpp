// Taskflow as a benchmark peer of lockstep's executor: a static task graph given as forward
// CSR arrays (task t depends on deps[offsets[t] .. offsets[t + 1]]), built once into a
// tf::Taskflow with an empty task per index and run many times on a tf::Executor of a fixed
// number of workers, as the executor's bench runs one prebuilt FrozenGraph.
//
// The C interface below is used by src/lib.rs only. lockstep_tf_new and lockstep_tf_run
// catch every C++ exception and report it as a status; the other functions cannot throw
// (they are noexcept, so a throw would end the process, never unwind into Rust).

#include <taskflow/taskflow.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace {

struct Graph {
  explicit Graph(std::size_t workers) : executor(workers) {}
  tf::Executor executor;
  tf::Taskflow flow;
  // Only in a counting graph: the global position at which each task ran, and the counter.
  std::vector<std::uint64_t> order;
  std::atomic<std::uint64_t> next{1};
};

}  // namespace

extern "C" {

// Builds the graph; returns null if Taskflow threw (for example out of memory). `counting`
// makes every task record when it ran (lockstep_tf_order), for the crate's tests; the
// benchmark's tasks only keep their index alive, as the executor bench's task function does.
void* lockstep_tf_new(const std::uint32_t* offsets, const std::uint32_t* deps, std::size_t n,
                      std::size_t workers, int counting) noexcept {
  try {
    auto g = std::make_unique<Graph>(workers);
    std::vector<tf::Task> tasks;
    tasks.reserve(n);
    if (counting) {
      g->order.assign(n, 0);
      Graph* raw = g.get();
      for (std::size_t t = 0; t < n; ++t) {
        tasks.push_back(g->flow.emplace([raw, t]() {
          raw->order[t] = raw->next.fetch_add(1, std::memory_order_relaxed);
        }));
      }
    } else {
      for (std::size_t t = 0; t < n; ++t) {
        tasks.push_back(g->flow.emplace([t]() { asm volatile("" : : "r"(t)); }));
      }
    }
    for (std::size_t t = 0; t < n; ++t) {
      for (std::uint32_t e = offsets[t]; e < offsets[t + 1]; ++e) {
        tasks[deps[e]].precede(tasks[t]);
      }
    }
    return g.release();
  } catch (...) {
    return nullptr;
  }
}

// Runs the whole graph once and waits for it. 0 on success, -1 if Taskflow threw.
int lockstep_tf_run(void* graph) noexcept {
  try {
    auto* g = static_cast<Graph*>(graph);
    // get(), not wait(): an exception of a task is rethrown here and reported as -1.
    g->executor.run(g->flow).get();
    return 0;
  } catch (...) {
    return -1;
  }
}

// The position (from 1) at which task t ran in the last run of a counting graph, 0 if it
// did not run or the graph does not count.
std::uint64_t lockstep_tf_order(const void* graph, std::size_t t) noexcept {
  const auto* g = static_cast<const Graph*>(graph);
  return t < g->order.size() ? g->order[t] : 0;
}

// Resets a counting graph's record before a run.
void lockstep_tf_reset(void* graph) noexcept {
  auto* g = static_cast<Graph*>(graph);
  std::fill(g->order.begin(), g->order.end(), 0);
  g->next.store(1, std::memory_order_relaxed);
}

void lockstep_tf_free(void* graph) noexcept { delete static_cast<Graph*>(graph); }

}  // extern "C"
