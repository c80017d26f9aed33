// Engine's steps in flight (engine.h): planning and sending them, taking their answers in the
// order sent.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/engine.h"
#include "coordinator/step_wire.h"

namespace tpserve {
namespace {

// A step's work in the units its time grows with: every token's linears, plus its attention
// over the context so far, a 1,024-token context counting as much again.
double StepWork(const ScheduledBatch& batch) {
  double work = 1.0;  // the step's fixed cost (plan, RPC, sampling)
  for (const ScheduledBatch::Entry& e : batch.entries) {
    work += e.num_tokens * (1.0 + (e.start + e.num_tokens) / 1024.0);
  }
  return work;
}

// How much slower than so far a step may run before it counts as stuck.
constexpr double kStepDeadlineMargin = 8.0;

}  // namespace

absl::Duration Engine::StepTimeout(double work) const {
  return std::max(options_.step_timeout,
                  absl::Seconds(kStepDeadlineMargin * seconds_per_work_ * work));
}

bool Engine::SendSteps() {
  bool sent = false;
  while (!dispatcher_.full()) {
    ScheduledBatch batch = scheduler_.Schedule();
    if (batch.empty()) break;
    RecordQueueTimes(batch);
    Send(std::move(batch));
    sent = true;
  }
  if (sent) PublishStats();
  return sent;
}

void Engine::Send(ScheduledBatch batch) {
  Flight& flight = flights_.emplace_back();
  flight.batch = std::move(batch);
  flight.step_id = ++step_id_;
  flight.work = StepWork(flight.batch);
  flight.sent = absl::Now();
  // A step waits for those ahead of it in the stages: its deadline counts their work too, and
  // comes no sooner than theirs.
  double work = 0;
  absl::Time deadline = flight.sent;
  for (const Flight& f : flights_) {
    work += f.work;
    deadline = std::max(deadline, f.deadline);
  }
  flight.deadline = std::max(deadline, flight.sent + StepTimeout(work));
  const absl::Duration timeout = flight.deadline - flight.sent;
  const int64_t deadline_ms = absl::ToUnixMillis(flight.deadline);
  dispatcher_.Send(ToStepRequest(flight.batch, flight.step_id, deadline_ms), timeout);
}

void Engine::LandOldest() {
  absl::StatusOr<v1::StepResponse> response = dispatcher_.TakeOldest();
  Flight flight = std::move(flights_.front());
  flights_.pop_front();
  const absl::Time now = absl::Now();
  if (!response.ok()) {
    scheduler_.Returned(flight.batch);
    MarkDegraded(response.status());  // abandons the other steps in flight
    DropFlights();
    return;
  }
  if (!response->has_refused()) {
    // The step's own time: from when it was sent or the one before it landed, whichever is later.
    const double measured =
        absl::ToDoubleSeconds(now - std::max(flight.sent, last_landed_)) / flight.work;
    seconds_per_work_ = 0.8 * seconds_per_work_ + 0.2 * measured;
    last_landed_ = now;
    Apply(flight.batch, FromStepResponse(&*response));
    return;
  }
  ScheduledBatch& batch = flight.batch;
  const v1::RefusedSequence& refused = response->refused();
  const auto entry = std::find_if(
      batch.entries.begin(), batch.entries.end(),
      [&](const ScheduledBatch::Entry& e) { return e.seq->seq_id == refused.seq_id(); });
  if (entry == batch.entries.end()) {
    scheduler_.Returned(batch);
    MarkDegraded(absl::InternalError(
        absl::StrCat("step ", flight.step_id, ": the workers refused sequence ", refused.seq_id(),
                     ", which the step does not hold (", refused.message(), ")")));
    DropFlights();
    return;
  }
  Sequence* seq = entry->seq;
  if (entry->is_new) seq->known_to_workers = false;  // the refused step added it nowhere
  batch.entries.erase(entry);
  batch.finished_seq_ids.clear();  // the workers dropped them before refusing
  // The engine checked the request's data before queueing it: what the workers still refuse is
  // the coordinator's fault, not the client's.
  Fail(*scheduler_.Finish(seq),
       absl::InternalError(
           absl::StrCat("the workers refused this request's step: ", refused.message())));
  // The others stay in flight: they run again as a new step.
  if (!batch.empty()) Send(std::move(batch));
}

void Engine::DropFlights() {
  while (!flights_.empty()) {
    dispatcher_.TakeOldest().IgnoreError();
    scheduler_.Returned(flights_.front().batch);
    flights_.pop_front();
  }
}

}  // namespace tpserve
