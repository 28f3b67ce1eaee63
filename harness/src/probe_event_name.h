#pragma once
// The name of a Probe event ("on_load_end"), for the findings of probe "harness" (a probe that
// threw). The driver's fan-out has the event as a member function pointer.

#include <type_traits>

#include "graphcheck/probe.h"

namespace graphcheck {

template <class Fn>
inline const char* event_name(Fn fn) {
#define GRAPHCHECK_EVENT_NAME(event)                                  \
  if constexpr (std::is_same_v<Fn, decltype(&Probe::event)>) {        \
    if (fn == &Probe::event) return #event;                           \
  }
  GRAPHCHECK_EVENT_NAME(on_scenario_begin)
  GRAPHCHECK_EVENT_NAME(on_construct_begin)
  GRAPHCHECK_EVENT_NAME(on_construct_end)
  GRAPHCHECK_EVENT_NAME(on_load_begin)
  GRAPHCHECK_EVENT_NAME(on_load_end)
  GRAPHCHECK_EVENT_NAME(on_pwal_begin)
  GRAPHCHECK_EVENT_NAME(on_pwal_end)
  GRAPHCHECK_EVENT_NAME(on_warmup_begin)
  GRAPHCHECK_EVENT_NAME(on_warmup_end)
  GRAPHCHECK_EVENT_NAME(on_capture_begin)
  GRAPHCHECK_EVENT_NAME(on_capture_end)
  GRAPHCHECK_EVENT_NAME(on_replay_begin)
  GRAPHCHECK_EVENT_NAME(on_replay_end)
  GRAPHCHECK_EVENT_NAME(on_compare_begin)
  GRAPHCHECK_EVENT_NAME(on_compare_end)
  GRAPHCHECK_EVENT_NAME(on_refit_begin)
  GRAPHCHECK_EVENT_NAME(on_refit_end)
  GRAPHCHECK_EVENT_NAME(on_sleep_begin)
  GRAPHCHECK_EVENT_NAME(on_sleep_end)
  GRAPHCHECK_EVENT_NAME(on_wake_begin)
  GRAPHCHECK_EVENT_NAME(on_wake_end)
  GRAPHCHECK_EVENT_NAME(on_hook)
  GRAPHCHECK_EVENT_NAME(on_growth_measured)
  GRAPHCHECK_EVENT_NAME(on_census_filled)
  GRAPHCHECK_EVENT_NAME(on_idempotence_checked)
  GRAPHCHECK_EVENT_NAME(on_validation_replays)
  GRAPHCHECK_EVENT_NAME(on_replay_nan)
  GRAPHCHECK_EVENT_NAME(on_coverage_measured)
  GRAPHCHECK_EVENT_NAME(on_poison_filled)
  GRAPHCHECK_EVENT_NAME(on_noise_measured)
  GRAPHCHECK_EVENT_NAME(on_stream_orders_compared)
  GRAPHCHECK_EVENT_NAME(on_transfer_checked)
  GRAPHCHECK_EVENT_NAME(on_scenario_end)
#undef GRAPHCHECK_EVENT_NAME
  return "an event";
}

}  // namespace graphcheck
