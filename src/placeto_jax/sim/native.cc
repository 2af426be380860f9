// The placement simulator as an XLA FFI kernel for the CPU (`sim/native.py` registers it).
//
// The same discrete-event algorithm as the Python reference (`sim/reference.py`), statement for
// statement: an event heap processed instant by instant in rounds; each idle device starts its
// ready op smallest by (ready time, index), each free bus its first queued transfer once that op
// has ended; all events of one instant are applied before anyone chooses again. Every float
// operation is the reference's, in the same order (built with -ffp-contract=off), so float64
// outputs are bit-equal to the reference. Cost per placement: O((N + E) log N).
//
// Buffers (the graph and cluster are those of `SimGraph` / `SimCluster`, padded to Np ops):
//   n_ops [G] s32, cost / out_bytes / param_bytes / inner_kernels [G, Np] F, n_parents [G, Np]
//   s32, children [G, Np, K] s32 (each op's consumers first, then Np), speed / bandwidth [G, D]
//   F, delta1 / delta2 [G] F, placements [G, R, Np] s32;
//   results makespan [G, R], start / end [G, R, Np], peak_memory [G, R, D], transfer_start /
//   arrival [G, R, Np, D] (-inf where no transfer); G = 1 or the product of vmapped axes (an
//   input with a single group serves them all).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <queue>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int32_t kEveryRemote = -1;  // a transfer serving all the op's remote devices

// An event is (time µs, kind * n_dev + device): per device at most one completion is pending
// (it runs one op at a time, `running`), one arrival (its bus sends one transfer at a time,
// `sending`), and one wake-up each for the device and the bus after their gaps (delta1, delta2).
// Within one round (the events of one instant pending when the round begins) the order of
// applying events does not matter: each changes only its own device's or bus's state, parent
// counts, and ready sets ordered by (ready time, op). So events need no sequence numbers.
enum Kind : int32_t { kComplete = 0, kArrive = 1, kWake = 2 };

// One group's graph and cluster: pointers into the call's buffers.
template <typename T>
struct GraphView {
  int32_t n, n_pad, n_dev;
  const T* cost;
  const T* out_bytes;
  const T* param_bytes;
  const T* inner;
  const int32_t* n_parents;
  const int32_t* kid_begin;  // [n + 1] v's consumers are kids[kid_begin[v]:kid_begin[v + 1]]
  const int32_t* kids;       // consumers of real ops, compacted from the padded [n_pad, K] rows
  const T* speed;
  const T* bandwidth;
  T delta1, delta2;
};

// One placement's outputs.
template <typename T>
struct RowOut {
  T* makespan;
  T* start;     // [n_pad]
  T* end;       // [n_pad]
  T* peak;      // [n_dev]
  T* xfer;      // [n_pad, n_dev]
  T* arrival;   // [n_pad, n_dev]
};

using ReadyKey = std::pair<double, int32_t>;  // (ready time, op): exact for float and double

// Scratch reused across the placements of one call.
template <typename T>
struct Work {
  std::vector<T> duration, device_free_at, bus_free_at;
  std::vector<int32_t> missing, running, bus_head, seen;
  std::vector<int32_t> remote, n_remote;  // [n_pad, n_dev], [n_pad]: FindRemoteDevices
  // Instants (distinct event times, counted in time order) of each op's start and end and of
  // each (op, device) arrival: peak memory sums byte changes per instant instead of sorting.
  std::vector<int32_t> start_at, end_at, arrive_at, use_at;
  int32_t n_instants = 0;
  std::vector<T> live;  // [n_dev, n_instants] bytes allocated minus freed at each instant
  std::vector<char> ended, bus_busy;
  std::vector<std::priority_queue<ReadyKey, std::vector<ReadyKey>, std::greater<ReadyKey>>> ready;
  std::vector<std::vector<std::pair<int32_t, int32_t>>> bus_queue;  // (op, destination)
  std::priority_queue<std::pair<T, int32_t>, std::vector<std::pair<T, int32_t>>,
                      std::greater<std::pair<T, int32_t>>>
      events;
  std::vector<std::pair<int32_t, int32_t>> sending;  // [n_dev] (op, destination) on each bus
  // Where the event loop stands: the current time (µs) and instant, the ops started, and the
  // events of instant `now` popped but not applied (`paused`: `Run` stopped before them).
  T now = T(0);
  int32_t instant = 0, n_started = 0;
  std::vector<std::pair<T, int32_t>> batch;
  bool paused = false;
};

template <typename T>
int32_t Device(const GraphView<T>& g, const int32_t* place, int32_t v) {
  return std::min(std::max(place[v], 0), g.n_dev - 1);  // padding ops may hold anything
}

// Remote devices of v's consumers, ascending, into v's row of w.remote; their count into
// w.n_remote[v]. Computed when v completes, read when its transfers start and arrive.
template <typename T>
void FindRemoteDevices(const GraphView<T>& g, const int32_t* place, int32_t v, Work<T>& w) {
  std::fill(w.seen.begin(), w.seen.end(), 0);
  const int32_t home = place[v];
  for (int32_t j = g.kid_begin[v]; j < g.kid_begin[v + 1]; ++j) {
    if (place[g.kids[j]] != home) w.seen[place[g.kids[j]]] = 1;
  }
  int32_t* remote = w.remote.data() + int64_t(v) * g.n_dev;
  int32_t count = 0;
  for (int32_t d = 0; d < g.n_dev; ++d) {
    if (w.seen[d]) remote[count++] = d;
  }
  w.n_remote[v] = count;
}

// An op's running time on its device (µs).
template <typename T>
T Duration(const GraphView<T>& g, const int32_t* place, int32_t v) {
  return g.cost[v] / g.speed[Device(g, place, v)] + g.inner[v] * g.delta1;
}

// The state before the first instant of `place`'s schedule (reference.py `_simulate_one`).
template <typename T>
void Begin(const GraphView<T>& g, const int32_t* place, Work<T>& w, const RowOut<T>& out) {
  const int32_t n_dev = g.n_dev;
  for (int32_t v = 0; v < g.n_pad; ++v) {
    w.duration[v] = Duration(g, place, v);
    out.start[v] = T(0);
  }
  std::fill(out.xfer, out.xfer + int64_t(g.n_pad) * n_dev, -std::numeric_limits<T>::infinity());
  std::fill(out.arrival, out.arrival + int64_t(g.n_pad) * n_dev,
            -std::numeric_limits<T>::infinity());
  for (int32_t d = 0; d < n_dev; ++d) {
    w.ready[d] = {};
    w.bus_queue[d].clear();
  }
  w.events = {};
  std::fill(w.running.begin(), w.running.end(), -1);
  std::fill(w.device_free_at.begin(), w.device_free_at.end(), T(0));
  std::fill(w.bus_free_at.begin(), w.bus_free_at.end(), T(0));
  std::fill(w.bus_busy.begin(), w.bus_busy.end(), 0);
  std::fill(w.bus_head.begin(), w.bus_head.end(), 0);
  for (int32_t v = 0; v < g.n; ++v) {
    w.missing[v] = g.n_parents[v];
    w.ended[v] = 0;
    if (g.n_parents[v] == 0) w.ready[place[v]].push({0.0, v});
  }
  w.now = T(0);
  w.instant = 0;
  w.n_started = 0;
  w.batch.clear();
  w.paused = false;
}

// Whether an event of `w.batch` completes an op that `stop` marks ([n_pad] or null).
template <typename T>
bool Stops(const Work<T>& w, int32_t n_dev, const char* stop) {
  if (stop == nullptr) return false;
  for (const auto& event : w.batch) {
    if (event.second / n_dev == kComplete && stop[w.running[event.second % n_dev]]) return true;
  }
  return false;
}

// Runs the event loop from where `w` stands to the end, or pauses (returns true) before
// applying an instant at which an op marked in `stop` completes. Placements that differ only
// in ops whose inputs all come from ops not yet complete agree up to that point: nothing before
// it reads their devices (an op's device is read when it becomes ready, which is at a parent's
// completion or later, or at the start for ops without parents; and for its duration, which
// `Begin` computes and `Fork` recomputes).
template <typename T>
bool Run(const GraphView<T>& g, const int32_t* place, bool broadcast, Work<T>& w,
         const RowOut<T>& out, const char* stop) {
  const int32_t n_dev = g.n_dev;
  auto data_available = [&](int32_t c, T time) {
    if (--w.missing[c] == 0) {
      w.ready[place[c]].push({double(time), c});
    }
  };
  while (true) {
    if (!w.paused) {
      const T now = w.now;
      // Choose: every idle device starts its ready op with the smallest (ready time, index).
      for (int32_t d = 0; d < n_dev; ++d) {
        if (w.running[d] < 0 && w.device_free_at[d] <= now && !w.ready[d].empty()) {
          const int32_t v = w.ready[d].top().second;
          w.ready[d].pop();
          w.running[d] = v;
          out.start[v] = now;
          w.start_at[v] = w.instant;
          out.end[v] = now + w.duration[v];
          ++w.n_started;
          w.events.push({out.end[v], kComplete * n_dev + d});
        }
      }
      // Choose: every free bus starts its first queued transfer once that op has ended.
      for (int32_t d = 0; d < n_dev; ++d) {
        auto& queue = w.bus_queue[d];
        if (!w.bus_busy[d] && w.bus_free_at[d] <= now && w.bus_head[d] < int32_t(queue.size())) {
          const auto [v, dest] = queue[w.bus_head[d]];
          if (w.ended[v]) {
            ++w.bus_head[d];
            w.bus_busy[d] = 1;
            const T done = now + g.out_bytes[v] / g.bandwidth[d];
            if (dest == kEveryRemote) {
              const int32_t* remote = w.remote.data() + int64_t(v) * n_dev;
              for (int32_t i = 0; i < w.n_remote[v]; ++i) {
                out.xfer[int64_t(v) * n_dev + remote[i]] = now;
                out.arrival[int64_t(v) * n_dev + remote[i]] = done;
              }
            } else {
              out.xfer[int64_t(v) * n_dev + dest] = now;
              out.arrival[int64_t(v) * n_dev + dest] = done;
            }
            w.events.push({done, kArrive * n_dev + d});
            w.sending[d] = {v, dest};
          }
        }
      }
      // The events of the next instant (which may be this one: a later round), in heap order.
      // Applying them pushes only wake-ups after it, so popping them first changes nothing.
      if (w.events.empty()) return false;
      if (w.events.top().first != w.now) ++w.instant;
      w.now = w.events.top().first;
      w.batch.clear();
      while (!w.events.empty() && w.events.top().first == w.now) {
        w.batch.push_back(w.events.top());
        w.events.pop();
      }
      if (Stops(w, n_dev, stop)) {
        w.paused = true;
        return true;
      }
    }
    w.paused = false;
    const T now = w.now;
    for (const auto& event : w.batch) {
      const int32_t kind = event.second / n_dev, d = event.second % n_dev;
      if (kind == kComplete) {
        const int32_t v = w.running[d];
        w.ended[v] = 1;
        w.end_at[v] = w.instant;
        w.running[d] = -1;
        w.device_free_at[d] = w.duration[v] > T(0) ? out.end[v] + g.delta1 : out.end[v];
        if (w.device_free_at[d] > now) w.events.push({w.device_free_at[d], kWake * n_dev + d});
        for (int32_t j = g.kid_begin[v]; j < g.kid_begin[v + 1]; ++j) {
          if (place[g.kids[j]] == d) data_available(g.kids[j], now);
        }
        FindRemoteDevices(g, place, v, w);
        const int32_t* remote = w.remote.data() + int64_t(v) * n_dev;
        if (w.n_remote[v] > 0 && broadcast) {
          w.bus_queue[d].push_back({v, kEveryRemote});
        } else {
          for (int32_t i = 0; i < w.n_remote[v]; ++i) w.bus_queue[d].push_back({v, remote[i]});
        }
      } else if (kind == kArrive) {
        const auto [v, dest] = w.sending[d];
        w.bus_busy[d] = 0;
        w.bus_free_at[d] = now + g.delta2;
        if (w.bus_free_at[d] > now) w.events.push({w.bus_free_at[d], kWake * n_dev + d});
        if (dest == kEveryRemote) {
          const int32_t* remote = w.remote.data() + int64_t(v) * n_dev;
          for (int32_t i = 0; i < w.n_remote[v]; ++i) {
            w.arrive_at[int64_t(v) * n_dev + remote[i]] = w.instant;
          }
        } else {
          w.arrive_at[int64_t(v) * n_dev + dest] = w.instant;
        }
        for (int32_t j = g.kid_begin[v]; j < g.kid_begin[v + 1]; ++j) {
          const int32_t c = g.kids[j];
          const bool served = dest == kEveryRemote ? place[c] != d : place[c] == dest;
          if (served) data_available(c, now);
        }
      }
    }
  }
}

// The makespan of a finished `Run`; false if ops never start.
template <typename T>
bool End(const GraphView<T>& g, Work<T>& w, const RowOut<T>& out) {
  for (int32_t v = g.n; v < g.n_pad; ++v) out.end[v] = out.start[v] + w.duration[v];
  T makespan = out.end[0];
  for (int32_t v = 1; v < g.n_pad; ++v) makespan = std::max(makespan, out.end[v]);
  *out.makespan = makespan;
  w.n_instants = w.instant + 1;
  return w.n_started == g.n;
}

// The schedule of one placement (reference.py `_simulate_one`); false if ops never start.
template <typename T>
bool Schedule(const GraphView<T>& g, const int32_t* place, bool broadcast, Work<T>& w,
              const RowOut<T>& out) {
  Begin(g, place, w, out);
  Run(g, place, broadcast, w, out, nullptr);
  return End(g, w, out);
}

// Peak memory per device (reference.py `_peak_memory`): each device's live bytes swept in time
// order, plus the parameters of its ops. The reference sorts allocations and frees by time,
// frees first at one instant, and takes the largest running sum; that largest sum is the one
// after all of an instant's changes (frees only lower it, allocations only raise it), so summing
// the changes per instant and sweeping the instants in order gives the same peak (byte counts
// add exactly), in O(N D + E) instead of a sort.
template <typename T>
void PeakMemory(const GraphView<T>& g, const int32_t* place, Work<T>& w, const RowOut<T>& out) {
  const int32_t n_dev = g.n_dev, n_at = w.n_instants;
  w.live.assign(int64_t(n_dev) * n_at, T(0));
  T* live = w.live.data();
  for (int32_t v = 0; v < g.n; ++v) {
    const T size = g.out_bytes[v];
    if (size == T(0)) continue;  // adds nothing to any live sum
    const int32_t home = place[v];
    std::fill(w.use_at.begin(), w.use_at.end(), -1);  // last use per device, -1: none
    w.use_at[home] = w.end_at[v];
    for (int32_t j = g.kid_begin[v]; j < g.kid_begin[v + 1]; ++j) {
      const int32_t c = g.kids[j];
      w.use_at[place[c]] = std::max(w.use_at[place[c]], w.end_at[c]);
    }
    // v's remote devices (found at its completion) are those holding a copy: it arrived there.
    const int32_t* remote = w.remote.data() + int64_t(v) * n_dev;
    const int32_t* arrive_at = w.arrive_at.data() + int64_t(v) * n_dev;
    int32_t home_free = w.use_at[home];
    for (int32_t i = 0; i < w.n_remote[v]; ++i) {
      home_free = std::max(home_free, arrive_at[remote[i]]);
    }
    live[int64_t(home) * n_at + w.start_at[v]] += size;
    live[int64_t(home) * n_at + home_free] -= size;
    for (int32_t i = 0; i < w.n_remote[v]; ++i) {
      const int32_t d = remote[i];
      live[int64_t(d) * n_at + arrive_at[d]] += size;
      live[int64_t(d) * n_at + w.use_at[d]] -= size;
    }
  }
  for (int32_t d = 0; d < n_dev; ++d) {
    T sum = T(0), peak = T(0);
    for (int32_t i = 0; i < n_at; ++i) {
      sum += live[int64_t(d) * n_at + i];
      peak = std::max(peak, sum);
    }
    out.peak[d] = peak;
  }
  std::vector<T>& params = w.device_free_at;  // reused: the parameter bytes per device
  std::fill(params.begin(), params.end(), T(0));
  for (int32_t v = 0; v < g.n_pad; ++v) params[Device(g, place, v)] += g.param_bytes[v];
  for (int32_t d = 0; d < n_dev; ++d) out.peak[d] = out.peak[d] + params[d];
}

// The consumers of ops [0, n) from padded rows [n_pad, n_kids] (each row's consumers first,
// then entries >= n: absent), as offsets `begin` [n + 1] into the list `kids`: v's are
// kids[begin[v]:begin[v + 1]].
struct Consumers {
  std::vector<int32_t> begin, kids;
};

Consumers CompactChildren(const int32_t* children, int32_t n, int64_t n_kids) {
  Consumers out;
  out.begin.assign(n + 1, 0);
  for (int32_t v = 0; v < n; ++v) {
    for (int64_t j = 0; j < n_kids; ++j) {
      const int32_t c = children[v * n_kids + j];
      if (c < 0 || c >= n) break;
      out.kids.push_back(c);
    }
    out.begin[v + 1] = int32_t(out.kids.size());
  }
  return out;
}

// Scratch for one thread's placements of a graph of n_pad ops on n_dev devices.
template <typename T>
Work<T> MakeWork(int64_t n_pad, int64_t n_dev) {
  Work<T> w;
  w.duration.resize(n_pad);
  w.missing.resize(n_pad);
  w.ended.resize(n_pad);
  w.start_at.resize(n_pad);
  w.end_at.resize(n_pad);
  w.arrive_at.resize(n_pad * n_dev);
  for (auto* v : {&w.device_free_at, &w.bus_free_at}) v->resize(n_dev);
  for (auto* v : {&w.running, &w.bus_head, &w.seen, &w.use_at}) v->resize(n_dev);
  w.remote.resize(n_pad * n_dev);
  w.n_remote.resize(n_pad);
  w.bus_busy.resize(n_dev);
  w.ready.resize(n_dev);
  w.bus_queue.resize(n_dev);
  w.sending.resize(n_dev);
  return w;
}

// Stride of an input over the groups: 0 when one group serves all, else its per-group size;
// -1 when its size matches neither.
int64_t GroupStride(size_t count, int64_t per_group, int64_t groups) {
  if (int64_t(count) == per_group) return 0;
  if (int64_t(count) == per_group * groups) return per_group;
  return -1;
}

// Placement rows [G or 1, rows, n_pad] of a call, checked by `Graphs::Check`.
struct Rows {
  const int32_t* data;
  size_t count;
  int64_t rows;
  const char* name;
  int64_t stride = 0;  // over the groups, set by `Check`

  const int32_t* Row(int64_t grp, int64_t r, int64_t n_pad) const {
    return data + grp * stride + r * n_pad;
  }
};

// The graph and cluster inputs both kernels take (`SimGraph`, `SimCluster`), for G groups.
template <ffi::DataType F>
struct Graphs {
  using T = ffi::NativeType<F>;
  ffi::Buffer<ffi::S32> n_ops;
  ffi::Buffer<F> cost, out_bytes, param_bytes, inner;
  ffi::Buffer<ffi::S32> n_parents, children;
  ffi::Buffer<F> speed, bandwidth, delta1, delta2;
  int64_t n_pad = 0, n_kids = 0, n_dev = 0, groups = 0;
  int64_t stride[11] = {};
  std::vector<Consumers> consumers;  // each group's (one when all share the graph)

  // Checks each input's size (one graph or G) and the devices of `rows`; builds the consumer
  // lists. `groups` G is the product of the vmapped axes.
  ffi::Error Check(int64_t pad, int64_t n_groups, std::vector<Rows*> rows) {
    n_pad = pad;
    groups = n_groups;
    n_kids = children.dimensions().back();
    n_dev = speed.dimensions().back();
    struct Input {
      size_t count;
      int64_t per_group;
      const char* name;
    };
    const Input inputs[] = {{n_ops.element_count(), 1, "n_ops"},
                            {cost.element_count(), n_pad, "cost"},
                            {out_bytes.element_count(), n_pad, "out_bytes"},
                            {param_bytes.element_count(), n_pad, "param_bytes"},
                            {inner.element_count(), n_pad, "inner_kernels"},
                            {n_parents.element_count(), n_pad, "n_parents"},
                            {children.element_count(), n_pad * n_kids, "children"},
                            {speed.element_count(), n_dev, "speed"},
                            {bandwidth.element_count(), n_dev, "bandwidth"},
                            {delta1.element_count(), 1, "delta1"},
                            {delta2.element_count(), 1, "delta2"}};
    auto mismatch = [](const char* name) {
      return ffi::Error::InvalidArgument(std::string("native simulator: input ") + name +
                                         " matches neither one graph nor the batch");
    };
    for (int i = 0; i < 11; ++i) {
      stride[i] = GroupStride(inputs[i].count, inputs[i].per_group, groups);
      if (stride[i] < 0) return mismatch(inputs[i].name);
    }
    for (Rows* r : rows) {
      r->stride = GroupStride(r->count, r->rows * n_pad, groups);
      if (r->stride < 0) return mismatch(r->name);
    }
    for (int64_t grp = 0; grp < groups; ++grp) {
      const int32_t n = n_ops.typed_data()[grp * stride[0]];
      if (n < 0 || n > n_pad) return ffi::Error::InvalidArgument("native simulator: n_ops");
      if (grp == 0 || stride[6] != 0) {
        consumers.push_back(CompactChildren(children.typed_data() + grp * stride[6], n, n_kids));
      }
      for (const Rows* r : rows) {
        for (int64_t i = 0; i < r->rows; ++i) {
          const int32_t* place = r->Row(grp, i, n_pad);
          for (int32_t v = 0; v < n; ++v) {
            if (place[v] < 0 || place[v] >= n_dev) {
              return ffi::Error::InvalidArgument(
                  "native simulator: op " + std::to_string(v) + " placed on device " +
                  std::to_string(place[v]) + " of " + std::to_string(n_dev));
            }
          }
        }
      }
    }
    return ffi::Error::Success();
  }

  GraphView<T> View(int64_t grp) const {
    const Consumers& kids = consumers[stride[6] != 0 ? grp : 0];
    return {n_ops.typed_data()[grp * stride[0]],
            int32_t(n_pad),
            int32_t(n_dev),
            cost.typed_data() + grp * stride[1],
            out_bytes.typed_data() + grp * stride[2],
            param_bytes.typed_data() + grp * stride[3],
            inner.typed_data() + grp * stride[4],
            n_parents.typed_data() + grp * stride[5],
            kids.begin.data(),
            kids.kids.data(),
            speed.typed_data() + grp * stride[7],
            bandwidth.typed_data() + grp * stride[8],
            delta1.typed_data()[grp * stride[9]],
            delta2.typed_data()[grp * stride[10]]};
  }
};

// Runs `simulate(first, last)` over [0, total) on up to `threads` threads, contiguous ranges of
// at least `per_thread` each; false if any range returned false.
template <typename Body>
bool Parallel(int64_t total, int64_t threads, int64_t per_thread, Body simulate) {
  const int64_t n_threads = std::max<int64_t>(1, std::min<int64_t>(threads, total / per_thread));
  std::vector<char> done(n_threads, 1);
  std::vector<std::thread> helpers;
  for (int64_t t = 1; t < n_threads; ++t) {
    helpers.emplace_back([&, t] {
      done[t] = simulate(total * t / n_threads, total * (t + 1) / n_threads);
    });
  }
  done[0] = simulate(0, total / n_threads);
  for (auto& helper : helpers) helper.join();
  return std::find(done.begin(), done.end(), 0) == done.end();
}

// The placements' rows and ops per row (their last two axes), after checking the ranks:
// placements need rows and ops axes, children ops and slots, speed devices.
template <ffi::DataType F>
ffi::Error RowShape(const ffi::Buffer<ffi::S32>& placements, const ffi::Buffer<ffi::S32>& children,
                    const ffi::Buffer<F>& speed, int64_t& rows, int64_t& n_pad) {
  const auto pdims = placements.dimensions();
  if (pdims.size() < 2 || children.dimensions().size() < 2 || speed.dimensions().size() < 1) {
    return ffi::Error::InvalidArgument("native simulator: placements, children or speed rank");
  }
  rows = pdims[pdims.size() - 2];
  n_pad = pdims[pdims.size() - 1];
  return ffi::Error::Success();
}

const char kCycle[] = "native simulator: some ops never start (a cycle?)";

template <ffi::DataType F>
ffi::Error Simulate(ffi::Buffer<ffi::S32> n_ops, ffi::Buffer<F> cost, ffi::Buffer<F> out_bytes,
                    ffi::Buffer<F> param_bytes, ffi::Buffer<F> inner,
                    ffi::Buffer<ffi::S32> n_parents, ffi::Buffer<ffi::S32> children,
                    ffi::Buffer<F> speed, ffi::Buffer<F> bandwidth, ffi::Buffer<F> delta1,
                    ffi::Buffer<F> delta2, ffi::Buffer<ffi::S32> placements, bool broadcast,
                    int32_t threads,
                    ffi::ResultBuffer<F> makespan, ffi::ResultBuffer<F> start,
                    ffi::ResultBuffer<F> end, ffi::ResultBuffer<F> peak,
                    ffi::ResultBuffer<F> xfer, ffi::ResultBuffer<F> arrival) {
  using T = ffi::NativeType<F>;
  int64_t rows = 0, n_pad = 0;
  if (ffi::Error error = RowShape(placements, children, speed, rows, n_pad); error.failure()) {
    return error;
  }
  if (rows == 0 || n_pad == 0) return ffi::Error::Success();
  Graphs<F> graphs{n_ops, cost, out_bytes, param_bytes, inner, n_parents,
                   children, speed, bandwidth, delta1, delta2};
  Rows placed{placements.typed_data(), placements.element_count(), rows, "placements"};
  const int64_t groups = int64_t(makespan->element_count()) / rows;
  if (ffi::Error error = graphs.Check(n_pad, groups, {&placed}); error.failure()) return error;
  const int64_t n_dev = graphs.n_dev;
  // Placements [first, last) in (group, row) order, on one thread; false if ops never start.
  auto simulate_range = [&](int64_t first, int64_t last) {
    Work<T> w = MakeWork<T>(n_pad, n_dev);
    for (int64_t row = first; row < last; ++row) {
      const int64_t grp = row / rows, r = row % rows;
      const GraphView<T> g = graphs.View(grp);
      const int32_t* place = placed.Row(grp, r, n_pad);
      const RowOut<T> out{makespan->typed_data() + row,
                          start->typed_data() + row * n_pad,
                          end->typed_data() + row * n_pad,
                          peak->typed_data() + row * n_dev,
                          xfer->typed_data() + row * n_pad * n_dev,
                          arrival->typed_data() + row * n_pad * n_dev};
      if (!Schedule(g, place, broadcast, w, out)) return false;
      PeakMemory(g, place, w, out);
    }
    return true;
  };
  // Placements are independent (the outputs do not depend on the split).
  if (!Parallel(groups * rows, threads, 4, simulate_range)) {
    return ffi::Error::InvalidArgument(kCycle);
  }
  return ffi::Error::Success();
}

// A schedule's per-op outputs, owned (the variants kernel returns only makespans and peaks).
template <typename T>
struct Trace {
  std::vector<T> makespan, start, end, peak, xfer, arrival;

  Trace(int64_t n_pad, int64_t n_dev)
      : makespan(1), start(n_pad), end(n_pad), peak(n_dev), xfer(n_pad * n_dev),
        arrival(n_pad * n_dev) {}

  RowOut<T> Out() {
    return {makespan.data(), start.data(), end.data(), peak.data(), xfer.data(), arrival.data()};
  }
};

// Makespans and peak memory of placements [R, n_pad] that differ from `base` [n_pad] in a few
// ops, the same as `Simulate`'s: `base`'s schedule runs once up to the first completion of a
// parent of an op some row moves (`Run`'s `stop`), and each row goes on from a copy of it.
template <ffi::DataType F>
ffi::Error Variants(ffi::Buffer<ffi::S32> n_ops, ffi::Buffer<F> cost, ffi::Buffer<F> out_bytes,
                    ffi::Buffer<F> param_bytes, ffi::Buffer<F> inner,
                    ffi::Buffer<ffi::S32> n_parents, ffi::Buffer<ffi::S32> children,
                    ffi::Buffer<F> speed, ffi::Buffer<F> bandwidth, ffi::Buffer<F> delta1,
                    ffi::Buffer<F> delta2, ffi::Buffer<ffi::S32> base,
                    ffi::Buffer<ffi::S32> placements, bool broadcast, int32_t threads,
                    ffi::ResultBuffer<F> makespan, ffi::ResultBuffer<F> peak) {
  using T = ffi::NativeType<F>;
  int64_t rows = 0, n_pad = 0;
  if (ffi::Error error = RowShape(placements, children, speed, rows, n_pad); error.failure()) {
    return error;
  }
  if (rows == 0 || n_pad == 0) return ffi::Error::Success();
  Graphs<F> graphs{n_ops, cost, out_bytes, param_bytes, inner, n_parents,
                   children, speed, bandwidth, delta1, delta2};
  Rows based{base.typed_data(), base.element_count(), 1, "base"};
  Rows placed{placements.typed_data(), placements.element_count(), rows, "placements"};
  const int64_t groups = int64_t(makespan->element_count()) / rows;
  if (ffi::Error error = graphs.Check(n_pad, groups, {&based, &placed}); error.failure()) {
    return error;
  }
  const int64_t n_dev = graphs.n_dev;
  for (int64_t grp = 0; grp < groups; ++grp) {
    const GraphView<T> g = graphs.View(grp);
    const int32_t* home = based.Row(grp, 0, n_pad);
    // The ops some row moves; the shared prefix stops at their parents' first completion, and
    // is empty when one of them has no parents (it is ready at the start).
    std::vector<char> moved(n_pad, 0), stop(n_pad, 0);
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t* place = placed.Row(grp, r, n_pad);
      for (int32_t v = 0; v < g.n; ++v) moved[v] |= place[v] != home[v];
    }
    bool shared = true;
    for (int32_t v = 0; v < g.n; ++v) {
      if (moved[v] && g.n_parents[v] == 0) shared = false;
      for (int32_t j = g.kid_begin[v]; j < g.kid_begin[v + 1]; ++j) stop[v] |= moved[g.kids[j]];
    }
    Work<T> prefix = MakeWork<T>(n_pad, n_dev);
    Trace<T> begun(n_pad, n_dev);
    Begin(g, home, prefix, begun.Out());
    if (shared) Run(g, home, broadcast, prefix, begun.Out(), stop.data());
    auto simulate_range = [&](int64_t first, int64_t last) {
      Work<T> w = prefix;  // copies assigned again for each row, reusing their storage
      Trace<T> trace = begun;
      for (int64_t r = first; r < last; ++r) {
        const int32_t* place = placed.Row(grp, r, n_pad);
        if (r > first) {
          w = prefix;
          trace = begun;
        }
        const RowOut<T> out = trace.Out();
        if (!shared) {
          Begin(g, place, w, out);
        } else {
          for (int32_t v = 0; v < g.n; ++v) {
            if (moved[v]) w.duration[v] = Duration(g, place, v);
          }
        }
        Run(g, place, broadcast, w, out, nullptr);
        if (!End(g, w, out)) return false;
        PeakMemory(g, place, w, out);
        makespan->typed_data()[grp * rows + r] = trace.makespan[0];
        std::copy(trace.peak.begin(), trace.peak.end(),
                  peak->typed_data() + (grp * rows + r) * n_dev);
      }
      return true;
    };
    if (!Parallel(rows, threads, 1, simulate_range)) return ffi::Error::InvalidArgument(kCycle);
  }
  return ffi::Error::Success();
}

template <ffi::DataType F>
constexpr auto GraphArgs() {
  return ffi::Ffi::Bind()
      .template Arg<ffi::Buffer<ffi::S32>>()  // n_ops
      .template Arg<ffi::Buffer<F>>()         // cost
      .template Arg<ffi::Buffer<F>>()         // out_bytes
      .template Arg<ffi::Buffer<F>>()         // param_bytes
      .template Arg<ffi::Buffer<F>>()         // inner_kernels
      .template Arg<ffi::Buffer<ffi::S32>>()  // n_parents
      .template Arg<ffi::Buffer<ffi::S32>>()  // children
      .template Arg<ffi::Buffer<F>>()         // speed
      .template Arg<ffi::Buffer<F>>()         // bandwidth
      .template Arg<ffi::Buffer<F>>()         // delta1
      .template Arg<ffi::Buffer<F>>();        // delta2
}

template <ffi::DataType F>
constexpr auto Binding() {
  return GraphArgs<F>()
      .template Arg<ffi::Buffer<ffi::S32>>()  // placements
      .template Attr<bool>("broadcast")
      .template Attr<int32_t>("threads")
      .template Ret<ffi::Buffer<F>>()  // makespan
      .template Ret<ffi::Buffer<F>>()  // start
      .template Ret<ffi::Buffer<F>>()  // end
      .template Ret<ffi::Buffer<F>>()  // peak_memory
      .template Ret<ffi::Buffer<F>>()  // transfer_start
      .template Ret<ffi::Buffer<F>>();  // arrival
}

template <ffi::DataType F>
constexpr auto VariantsBinding() {
  return GraphArgs<F>()
      .template Arg<ffi::Buffer<ffi::S32>>()  // base
      .template Arg<ffi::Buffer<ffi::S32>>()  // placements
      .template Attr<bool>("broadcast")
      .template Attr<int32_t>("threads")
      .template Ret<ffi::Buffer<F>>()  // makespan
      .template Ret<ffi::Buffer<F>>();  // peak_memory
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(PlacetoSimulateF32, Simulate<ffi::F32>, Binding<ffi::F32>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(PlacetoSimulateF64, Simulate<ffi::F64>, Binding<ffi::F64>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(PlacetoVariantsF32, Variants<ffi::F32>, VariantsBinding<ffi::F32>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(PlacetoVariantsF64, Variants<ffi::F64>, VariantsBinding<ffi::F64>());
