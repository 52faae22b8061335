// The task a simulated rank runs: its phases (an allreduce plan, or a test's), one after the
// other, each through PhaseRun (phase_run.cc), which is the executor's Run
// (collectives/executor.cc) with every blocking wait turned into a co_await on simulated time:
//
//   executor (Run / Flight)                  simulator (PhaseRun)
//   topUp: own sends `lead` ahead            same condition and order
//   postReceives(block): windows, gates      same loop; open() and retire() as Flight retires
//   process: waitRecv, foldAfterOwn, fold,   wait for arrival (+ o, + copy if unexpected),
//            forward, forwardAlso            retire, gamma x receives x bytes, two sends
//   Flight::postSend into a full window      wait until the oldest send is complete, then o
//   request->test() on a send                its last byte has left (network.h) by now
//   waitAllSends                             wait until the last send is complete
//
// Waits are co_awaits on simulated time; where two follow each other with nothing of the rank
// in between (a fold then a forward's send; a receive's arrival then its cost) they are one
// wait until the later time, which is the same time.
//
// Keep the two in step: a change to executor.cc or pipeline.cc's Flight needs the same change
// here (tests/sim/sim_executor_test.cc compares the messages both produce).
#pragma once

#include "bench/sim/simulator.h"
#include "bench/sim/task.h"
#include "bench/sim/world.h"

namespace ringfold::sim {

// Rank `rank`'s whole run: builds its phases with `plan` when it starts, runs them in order,
// and records its finish time; an error is handed to world.fail() with the rank and phase.
Task rankTask(World& world, int rank, const PlanFn& plan);

}  // namespace ringfold::sim
