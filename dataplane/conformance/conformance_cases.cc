#include "dataplane/conformance/conformance_cases.h"

#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace rankd::dataplane::conformance {
namespace {

using When = RankOutcome::When;

std::vector<float> Iota(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

RankCall Call(Operation operation, std::vector<size_t> shape,
              std::vector<float> values = {}) {
  RankCall call;
  call.operation = operation;
  call.shape = std::move(shape);
  call.values = std::move(values);
  return call;
}

RankOutcome Completes(std::vector<size_t> shape, std::vector<float> values) {
  RankOutcome o;
  o.shape = std::move(shape);
  o.values = std::move(values);
  return o;
}

RankOutcome Refused(absl::StatusCode code, std::string message) {
  RankOutcome o;
  o.when = When::kRefused;
  o.code = code;
  o.message = std::move(message);
  return o;
}

RankOutcome Fails(absl::StatusCode code, std::string message) {
  RankOutcome o = Refused(code, std::move(message));
  o.when = When::kFails;
  return o;
}

RankOutcome Ignored() {
  RankOutcome o;
  o.when = When::kIgnored;
  return o;
}

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

// --- Values: every operation moves the right bytes.

void AddValueCases(std::vector<ConformanceCase>& cases) {
  cases.push_back(
      {"AllReduceSumAddsEveryMembersInput",
       3,
       {},
       [](uint32_t r) {
         return Call(Operation::kAllReduceSum, {2, 2}, Iota(4, 10.0f * r));
       },
       [](uint32_t) {
         return Completes({2, 2}, {30, 33, 36, 39});
       }});
  cases.push_back({"AllReduceSumIntoRunsInPlace",
                   2,
                   {},
                   [](uint32_t r) {
                     RankCall c = Call(Operation::kAllReduceSumInto, {3},
                                       Iota(3, 1.0f + r));
                     c.output_is_input = true;
                     return c;
                   },
                   [](uint32_t) {
                     return Completes({3}, {3, 5, 7});
                   }});
  cases.push_back(
      {"AllGatherConcatenatesInMemberOrder",
       3,
       {},
       [](uint32_t r) {
         return Call(Operation::kAllGather, {1, 2}, Iota(2, 10.0f * r));
       },
       [](uint32_t) {
         return Completes({3, 2}, {0, 1, 10, 11, 20, 21});
       }});
  cases.push_back({"AllGatherOfScalarsGivesOnePerMember",
                   2,
                   {},
                   [](uint32_t r) {
                     return Call(Operation::kAllGather, {},
                                 {static_cast<float>(7 + r)});
                   },
                   [](uint32_t) {
                     return Completes({2}, {7, 8});
                   }});
  cases.push_back({"AllGatherOfNoRowsGivesNoRows",
                   2,
                   {},
                   [](uint32_t) {
                     return Call(Operation::kAllGather, {0, 3});
                   },
                   [](uint32_t) {
                     return Completes({0, 3}, {});
                   }});
  cases.push_back({"AllGatherIntoWritesTheCallersOutput",
                   2,
                   {},
                   [](uint32_t r) {
                     RankCall c = Call(Operation::kAllGatherInto, {2},
                                       Iota(2, 5.0f * r));
                     c.output_shape = {4};
                     return c;
                   },
                   [](uint32_t) {
                     return Completes({4}, {0, 1, 5, 6});
                   }});
  // Rank 0 sends 1 row to itself and 2 to rank 1; rank 1 sends 3 to rank
  // 0 and none to itself.
  cases.push_back(
      {"AllToAllVMovesTheCountedRows",
       2,
       {},
       [](uint32_t r) {
         RankCall c = Call(Operation::kAllToAllV, {3, 2}, Iota(6, 100.0f * r));
         c.send_counts =
             r == 0 ? std::vector<size_t>{1, 2} : std::vector<size_t>{3, 0};
         c.receive_counts =
             r == 0 ? std::vector<size_t>{1, 3} : std::vector<size_t>{2, 0};
         return c;
       },
       [](uint32_t r) {
         return r == 0 ? Completes({4, 2}, {0, 1, 100, 101, 102, 103, 104, 105})
                       : Completes({2, 2}, {2, 3, 4, 5});
       }});
  cases.push_back(
      {"AllToAllVIntoWithAllCountsZeroOnOneMember",
       2,
       {},
       [](uint32_t r) {
         RankCall c =
             Call(Operation::kAllToAllVInto, {r == 0 ? 2u : 0u, 1},
                  r == 0 ? std::vector<float>{4, 5} : std::vector<float>{});
         c.send_counts =
             r == 0 ? std::vector<size_t>{2, 0} : std::vector<size_t>{0, 0};
         c.receive_counts = c.send_counts;
         c.output_shape = {r == 0 ? 2u : 0u, 1};
         return c;
       },
       [](uint32_t r) {
         return r == 0 ? Completes({2, 1}, {4, 5}) : Completes({0, 1}, {});
       }});
  cases.push_back({"SendPairsWithReceive",
                   2,
                   {},
                   [](uint32_t r) {
                     RankCall c =
                         r == 0 ? Call(Operation::kSend, {2, 2}, Iota(4, 1))
                                : Call(Operation::kReceive, {2, 2});
                     c.peer = 1 - r;
                     return c;
                   },
                   [](uint32_t) {
                     return Completes({2, 2}, {1, 2, 3, 4});
                   }});
  cases.push_back({"ReceiveIntoWritesTheCallersOutput",
                   2,
                   {},
                   [](uint32_t r) {
                     RankCall c = r == 0
                                      ? Call(Operation::kSend, {3}, Iota(3, 7))
                                      : Call(Operation::kReceiveInto, {3});
                     c.output_shape = {3};
                     c.peer = 1 - r;
                     return c;
                   },
                   [](uint32_t) {
                     return Completes({3}, {7, 8, 9});
                   }});
  cases.push_back({"BatchSendReceiveRunsARing",
                   3,
                   {},
                   [](uint32_t r) {
                     RankCall c = Call(Operation::kBatchSendReceive, {2},
                                       Iota(2, 10.0f * r));
                     c.peer = (r + 1) % 3;
                     c.source = (r + 2) % 3;
                     return c;
                   },
                   [](uint32_t r) {
                     const float from = 10.0f * ((r + 2) % 3);
                     return Completes({2}, {from, from + 1});
                   }});
}

// --- Refusals: a call refused on its own arguments, before any native
// work, with the same words on every backend.

void AddRefusalCases(std::vector<ConformanceCase>& cases) {
  cases.push_back({"AllReduceSumOfBoolIsRefused",
                   2,
                   {},
                   [](uint32_t) {
                     RankCall c = Call(Operation::kAllReduceSum, {4});
                     c.dtype = TensorDtype::kBool;
                     return c;
                   },
                   [](uint32_t) {
                     return Refused(
                         kInvalid,
                         "$backend backend: all_reduce_sum cannot sum bool "
                         "values (a sum of booleans is not a boolean); use "
                         "agree_success for a logical AND or convert to an "
                         "integer dtype");
                   }});
  {
    auto outcome = [](uint32_t) {
      return Refused(
          kInvalid,
          "$backend backend: all_gather on world: the output is f32[3] "
          "but the result is f32[4]");
    };
    cases.push_back({"AllGatherIntoAnOutputOfTheWrongShape",
                     2,
                     {},
                     [](uint32_t) {
                       RankCall c =
                           Call(Operation::kAllGatherInto, {2}, Iota(2, 0));
                       c.output_shape = {3};
                       return c;
                     },
                     outcome});
  }
  // all_to_all_v always checks agreement first, so its refusals are told to
  // the peers (dataplane/agreement.h, PeersAwaitRecord).
  constexpr char kTold[] =
      " (the other members of world are told and refuse it too)";
  {
    auto outcome = [kTold](uint32_t) {
      return Refused(kInvalid,
                     std::string("$backend backend: all_to_all_v on world: the "
                                 "output overlaps the input, and all_to_all_v "
                                 "on world cannot run in place") +
                         kTold);
    };
    cases.push_back({"AllToAllVIntoItsOwnInput",
                     2,
                     {},
                     [](uint32_t) {
                       RankCall c =
                           Call(Operation::kAllToAllVInto, {2}, Iota(2, 0));
                       c.send_counts = {1, 1};
                       c.receive_counts = {1, 1};
                       c.output_is_input = true;
                       return c;
                     },
                     outcome});
  }
  {
    const std::string reason =
        ": send counts have 1 entries and receive counts 2; both need one per "
        "member (2)";
    auto outcome = [=](uint32_t) {
      return Refused(
          kInvalid, "$backend backend: all_to_all_v on world" + reason + kTold);
    };
    cases.push_back({"AllToAllVCountsOfTheWrongLength",
                     2,
                     {},
                     [](uint32_t) {
                       RankCall c =
                           Call(Operation::kAllToAllV, {2}, Iota(2, 0));
                       c.send_counts = {2};
                       c.receive_counts = {1, 1};
                       return c;
                     },
                     outcome});
  }
  {
    auto reason = [](uint32_t r) {
      const std::string i = std::to_string(r);
      return ": the self slot disagrees: send_counts[" + i +
             "] = 1 but receive_counts[" + i + "] = 2";
    };
    auto outcome = [=](uint32_t r) {
      return Refused(kInvalid, "$backend backend: all_to_all_v on world" +
                                   reason(r) + kTold);
    };
    cases.push_back({"AllToAllVSelfSlotsThatDiffer",
                     2,
                     {},
                     [](uint32_t r) {
                       RankCall c =
                           Call(Operation::kAllToAllV, {2}, Iota(2, 0));
                       c.send_counts = {1, 1};
                       c.receive_counts = {1, 1};
                       c.receive_counts[r] = 2;
                       return c;
                     },
                     outcome});
  }
  cases.push_back(
      {"SendToAPeerOutsideTheScope",
       2,
       {},
       [](uint32_t) {
         RankCall c = Call(Operation::kSend, {1}, {1});
         c.peer = 2;
         return c;
       },
       [](uint32_t) {
         return Refused(
             kInvalid,
             "$backend backend: send: peer 2 is outside the scope's 2 members");
       }});
  cases.push_back({"ReceiveFromItself",
                   2,
                   {},
                   [](uint32_t r) {
                     RankCall c = Call(Operation::kReceive, {1});
                     c.peer = r;
                     return c;
                   },
                   [](uint32_t r) {
                     return Refused(kInvalid,
                                    "$backend backend: receive: peer " +
                                        std::to_string(r) +
                                        " is this rank itself");
                   }});
  // A group that is not the world names itself, never the communicator
  // under it: group 8 is the data-parallel group of a 2-rank job, with the
  // world's members (common/topology.h), so NCCL may serve it with the
  // world's communicator or split one of its own.
  {
    auto outcome = [](uint32_t) {
      return Refused(kInvalid,
                     "$backend backend: all_to_all_v on group 8: send counts "
                     "have 1 entries and receive counts 2; both need one per "
                     "member (2) (the other members of group 8 are told and "
                     "refuse it too)");
    };
    cases.push_back({"AnAllToAllVRefusedOnAGroupIsToldToThatGroup",
                     2,
                     {},
                     [](uint32_t) {
                       RankCall c =
                           Call(Operation::kAllToAllV, {2}, Iota(2, 0));
                       c.scope = CollectiveScope::Group(8);
                       c.send_counts = {2};
                       c.receive_counts = {1, 1};
                       return c;
                     },
                     outcome});
  }
  cases.push_back({"ABatchWithAPeerOutsideAGroupNamesTheGroup",
                   2,
                   {},
                   [](uint32_t r) {
                     RankCall c = Call(Operation::kBatchSendReceive, {1}, {1});
                     c.scope = CollectiveScope::Group(8);
                     c.peer = 5;
                     c.source = 1 - r;
                     return c;
                   },
                   [](uint32_t) {
                     return Refused(kInvalid,
                                    "$backend backend: batch_send_receive on "
                                    "group 8: send 0 names member 5, which is "
                                    "outside group 8 (2 members)");
                   }});
  cases.push_back({"AGroupThisRankIsNotIn",
                   2,
                   {},
                   [](uint32_t) {
                     RankCall c = Call(Operation::kAllReduceSum, {1}, {1});
                     c.scope = CollectiveScope::Group(99);
                     return c;
                   },
                   [](uint32_t r) {
                     // The groups of a 2-rank data-parallel job
                     // (common/topology.h).
                     return Refused(
                         absl::StatusCode::kNotFound,
                         "$backend backend: all_reduce_sum: rank " +
                             std::to_string(r) +
                             " is not a member of group 99: its groups are " +
                             (r == 0 ? "1, 2, 4, 6, 8" : "1, 3, 5, 7, 8") +
                             ", and only those can be in capability "
                             "'collective_groups'");
                   }});
}

// --- The peer side of refusal telling (docs/contract.md, "Rules for every
// backend"): only rank 0 refuses its own arguments; rank 1's call is valid,
// but where members check agreement first (verify_agreement, and always for
// all_to_all_v) rank 0's refusal record reaches it and rank 1 refuses the
// same operation, naming rank 0 (dataplane/agreement.h, CollectiveVerdict),
// instead of waiting for op_timeout.

void AddToldRefusalCases(std::vector<ConformanceCase>& cases) {
  SessionSetup verify;
  verify.verify_agreement = true;
  // Rank 0's output is one element short; rank 1's is right.
  auto gather_into = [](CollectiveScope scope) {
    return [scope](uint32_t r) {
      RankCall c = Call(Operation::kAllGatherInto, {2}, Iota(2, 0));
      c.scope = scope;
      c.output_shape = {r == 0 ? 3u : 4u};
      return c;
    };
  };
  auto gather_told = [](const std::string& scope) {
    return [scope](uint32_t r) {
      if (r == 0) {
        return Refused(kInvalid, "$backend backend: all_gather on " + scope +
                                     ": the output is f32[3] but the result "
                                     "is f32[4] (the other members of " +
                                     scope + " are told and refuse it too)");
      }
      return Fails(kInvalid, "$backend all_gather on " + scope +
                                 ": rank 0 refused it on its own arguments "
                                 "(its error says why); nothing moved");
    };
  };
  cases.push_back({"AnAllGatherRefusedByOneRankIsToldToTheOther", 2, verify,
                   gather_into(CollectiveScope::World()),
                   gather_told("world")});
  cases.push_back({"AnAllGatherRefusedByOneRankOnAGroupIsToldToThatGroup", 2,
                   verify, gather_into(CollectiveScope::Group(8)),
                   gather_told("group 8")});
  // all_to_all_v checks its counts first without verify_agreement too.
  auto all_to_all = [](CollectiveScope scope) {
    return [scope](uint32_t r) {
      RankCall c = Call(Operation::kAllToAllV, {2}, Iota(2, 0));
      c.scope = scope;
      c.send_counts =
          r == 0 ? std::vector<size_t>{2} : std::vector<size_t>{1, 1};
      c.receive_counts = {1, 1};
      return c;
    };
  };
  auto all_to_all_told = [](const std::string& scope) {
    return [scope](uint32_t r) {
      if (r == 0) {
        return Refused(kInvalid, "$backend backend: all_to_all_v on " + scope +
                                     ": send counts have 1 entries and "
                                     "receive counts 2; both need one per "
                                     "member (2) (the other members of " +
                                     scope + " are told and refuse it too)");
      }
      return Fails(kInvalid, "$backend all_to_all_v on " + scope +
                                 ": rank 0 refused it on its own arguments "
                                 "(its error says why); nothing moved");
    };
  };
  cases.push_back({"AnAllToAllVRefusedByOneRankIsToldToTheOther",
                   2,
                   {},
                   all_to_all(CollectiveScope::World()),
                   all_to_all_told("world")});
  cases.push_back({"AnAllToAllVRefusedByOneRankOnAGroupIsToldToThatGroup",
                   2,
                   {},
                   all_to_all(CollectiveScope::Group(8)),
                   all_to_all_told("group 8")});
}

// --- Capabilities (docs/contract.md, "Capabilities"): a session opened
// narrowed to fewer capabilities (restrict_capabilities) advertises only
// those, and refuses the rest with Unimplemented naming the capability,
// before any native work; the session stays usable.

void AddCapabilityCases(std::vector<ConformanceCase>& cases) {
  // Everything a 2-rank data-parallel job can do, but `drop`; rank r's
  // groups are 1, 2 + r, 4 + r, 6 + r and 8 (common/topology.h).
  auto narrowed = [](std::function<void(DistributedCapabilities&)> drop) {
    DistributedCapabilities allow{
        true, {1, 2, 3, 4, 5, 6, 7, 8}, true, true, true};
    drop(allow);
    SessionSetup setup;
    setup.restrict_capabilities = allow;
    return setup;
  };
  auto advertised = [](uint32_t r,
                       std::function<void(DistributedCapabilities&)> drop) {
    DistributedCapabilities caps{
        true, {1, 2 + r, 4 + r, 6 + r, 8}, true, true, true};
    drop(caps);
    return caps;
  };
  auto refused = [advertised](
                     std::function<void(DistributedCapabilities&)> drop,
                     std::function<std::string(uint32_t)> message) {
    return [=](uint32_t r) {
      RankOutcome o = Refused(absl::StatusCode::kUnimplemented, message(r));
      o.advertises = advertised(r, drop);
      o.poison = absl::OkStatus();
      return o;
    };
  };
  {
    auto drop = [](DistributedCapabilities& c) { c.point_to_point = false; };
    cases.push_back({"AnUnadvertisedPointToPointIsRefusedNamingIt", 2,
                     narrowed(drop),
                     [](uint32_t r) {
                       RankCall c = r == 0 ? Call(Operation::kSend, {1}, {1})
                                           : Call(Operation::kReceive, {1});
                       c.peer = 1 - r;
                       return c;
                     },
                     refused(drop, [](uint32_t r) {
                       return std::string("$backend backend: ") +
                              (r == 0 ? "send" : "receive") +
                              " needs capability 'point_to_point', which "
                              "this backend does not advertise";
                     })});
    cases.push_back({"AnUnadvertisedBatchIsRefusedNamingIt", 2, narrowed(drop),
                     [](uint32_t r) {
                       RankCall c =
                           Call(Operation::kBatchSendReceive, {1}, {1});
                       c.peer = 1 - r;
                       c.source = 1 - r;
                       return c;
                     },
                     refused(drop, [](uint32_t) {
                       return std::string(
                           "$backend backend: batch_send_receive needs "
                           "capability 'point_to_point', which this backend "
                           "does not advertise");
                     })});
  }
  {
    auto drop = [](DistributedCapabilities& c) {
      c.variable_all_to_all = false;
    };
    cases.push_back(
        {"AnUnadvertisedAllToAllVIsRefusedNamingIt", 2, narrowed(drop),
         [](uint32_t) {
           RankCall c = Call(Operation::kAllToAllV, {2}, Iota(2, 0));
           c.send_counts = {1, 1};
           c.receive_counts = {1, 1};
           return c;
         },
         refused(drop, [](uint32_t) {
           return std::string(
               "$backend backend: all_to_all_v needs capability "
               "'variable_all_to_all', which this backend does "
               "not advertise");
         })});
  }
  {
    auto drop = [](DistributedCapabilities& c) { c.world_collectives = false; };
    cases.push_back(
        {"AnUnadvertisedWorldCollectiveIsRefusedNamingIt", 2, narrowed(drop),
         [](uint32_t) { return Call(Operation::kAllReduceSum, {1}, {1}); },
         refused(drop, [](uint32_t) {
           return std::string(
               "$backend backend: all_reduce_sum needs capability "
               "'world_collectives', which this backend does not "
               "advertise");
         })});
  }
  {
    auto drop = [](DistributedCapabilities& c) {
      c.collective_groups.erase(8);
    };
    cases.push_back({"AnUnadvertisedGroupIsRefusedNamingIt", 2, narrowed(drop),
                     [](uint32_t) {
                       RankCall c = Call(Operation::kAllGather, {1}, {1});
                       c.scope = CollectiveScope::Group(8);
                       return c;
                     },
                     refused(drop, [](uint32_t) {
                       return std::string(
                           "$backend backend: all_gather on group 8 needs "
                           "capability 'collective_groups' to include it, "
                           "which this backend does not advertise");
                     })});
  }
}

// --- The failure vocabulary (docs/contract.md, "Failures: one
// vocabulary"): Poison(cause) only latches, Abort(cause) latches and tears
// down, poison() returns the cause; a poisoned session advertises nothing.

void AddPoisonCases(std::vector<ConformanceCase>& cases) {
  cases.push_back({"APoisonedSessionRefusesWithTheCause",
                   2,
                   {},
                   [](uint32_t) {
                     RankCall c = Call(Operation::kAllReduceSum, {1}, {1});
                     c.before = {{SessionAction::Kind::kPoison,
                                  absl::AbortedError("the scheduler gave up")}};
                     return c;
                   },
                   [](uint32_t) {
                     RankOutcome o =
                         Refused(absl::StatusCode::kAborted,
                                 "$backend backend: all_reduce_sum refused: "
                                 "session poisoned by an earlier failure: the "
                                 "scheduler gave up");
                     o.poison = absl::AbortedError("the scheduler gave up");
                     return o;
                   }});
  // InvalidArgument means "refused, the session is still usable", which a
  // poisoned session never answers: the cause keeps its words and becomes
  // FailedPrecondition (dataplane/poison.h, AsPoisonCause).
  cases.push_back(
      {"AnInvalidArgumentPoisonCauseIsAFailedPrecondition",
       2,
       {},
       [](uint32_t) {
         RankCall c = Call(Operation::kAllGather, {1}, {1});
         c.before = {{SessionAction::Kind::kPoison,
                      absl::InvalidArgumentError("the plan was wrong")}};
         return c;
       },
       [](uint32_t) {
         RankOutcome o = Refused(absl::StatusCode::kFailedPrecondition,
                                 "$backend backend: all_gather refused: "
                                 "session poisoned by an earlier failure: the "
                                 "plan was wrong");
         o.poison = absl::FailedPreconditionError("the plan was wrong");
         return o;
       }});
  // The first cause wins: a later Poison or Abort changes nothing.
  cases.push_back(
      {"AnAbortedSessionRefusesWithTheCause",
       2,
       {},
       [](uint32_t r) {
         RankCall c = Call(Operation::kSend, {1}, {1});
         if (r == 1) c.operation = Operation::kReceive;
         c.peer = 1 - r;
         c.before = {
             {SessionAction::Kind::kAbort,
              absl::UnavailableError("rank 3's host is gone")},
             {SessionAction::Kind::kPoison, absl::AbortedError("too late")},
             {SessionAction::Kind::kAbort, absl::InternalError("later")}};
         return c;
       },
       [](uint32_t r) {
         RankOutcome o = Refused(absl::StatusCode::kUnavailable,
                                 std::string("$backend backend: ") +
                                     (r == 0 ? "send" : "receive") +
                                     " refused: session poisoned by an "
                                     "earlier failure: rank 3's host is gone");
         o.poison = absl::UnavailableError("rank 3's host is gone");
         return o;
       }});
  // Poison only latches: work already submitted still runs and completes
  // (on both members), and only what comes after is refused: "a caller
  // ... whose submitted work is still good (a scheduler draining a rank)"
  // (docs/contract.md).
  SessionSetup short_timeout;
  short_timeout.op_timeout = absl::Seconds(2);
  cases.push_back(
      {"PoisonDoesNotInterruptSubmittedWork", 2, short_timeout,
       [](uint32_t r) {
         RankCall c = Call(Operation::kAllReduceSum, {2}, {1, 2});
         if (r == 0) {
           c.after_submit = SessionAction{SessionAction::Kind::kPoison,
                                          absl::AbortedError("draining")};
         }
         return c;
       },
       [](uint32_t r) {
         RankOutcome o = Completes({2}, {2, 4});
         o.poison = r == 0 ? absl::AbortedError("draining") : absl::OkStatus();
         return o;
       }});
  // Abort tears down: work pending on a peer that stopped submitting fails
  // now, with the cause, long before op_timeout (a minute here). Both ranks
  // first connect the world, so rank 0's submission is accepted.
  SessionSetup long_timeout;
  long_timeout.op_timeout = absl::Seconds(60);
  cases.push_back(
      {"AbortFailsPendingWorkWithTheCause", 2, long_timeout,
       [](uint32_t r) {
         RankCall c = r == 1 ? Call(Operation::kNone, {})
                             : Call(Operation::kAllReduceSum, {2}, {1, 2});
         c.first = {Call(Operation::kAllReduceSum, {1}, {1})};
         c.after_submit =
             SessionAction{SessionAction::Kind::kAbort,
                           absl::UnavailableError("rank 1's host is gone")};
         return c;
       },
       [](uint32_t r) {
         if (r == 1) return Ignored();
         RankOutcome o =
             Fails(absl::StatusCode::kUnavailable, "rank 1's host is gone");
         o.message_is_suffix = true;
         o.poison = absl::UnavailableError("rank 1's host is gone");
         return o;
       }});
}

// --- Bounded waits and agreement failures.

void AddFailureCases(std::vector<ConformanceCase>& cases) {
  SessionSetup short_timeout;
  short_timeout.op_timeout = absl::Seconds(2);
  for (CancellationMode mode : {CancellationMode::kQuarantineUntilComplete,
                                CancellationMode::kNativeCancel}) {
    const bool quarantine = mode == CancellationMode::kQuarantineUntilComplete;
    // Both ranks connect the world with one all_reduce_sum first; then
    // rank 1 stops submitting, and rank 0's next one cannot complete.
    auto submits_alone = [mode](uint32_t r) {
      RankCall warm = Call(Operation::kAllReduceSum, {1}, {1});
      RankCall c = r == 1 ? Call(Operation::kNone, {})
                          : Call(Operation::kAllReduceSum, {2}, {1, 2});
      c.first = {warm};
      c.bounded_wait = absl::Milliseconds(200);
      c.mode = mode;
      return c;
    };
    cases.push_back(
        {quarantine ? "AMissedBoundedWaitQuarantines"
                    : "AMissedBoundedWaitCancelsNatively",
         2, short_timeout, submits_alone, [quarantine](uint32_t r) {
           if (r == 1) return Ignored();
           RankOutcome o;
           o.when = When::kMissesDeadline;
           o.next_code = absl::StatusCode::kDeadlineExceeded;
           o.next_message_prefix =
               std::string(
                   "$backend backend: all_reduce_sum refused: session "
                   "poisoned by an earlier failure: $backend backend: "
                   "all_reduce_sum on world missed its WaitBounded deadline "
                   "of 200ms; ") +
               (quarantine ? "its resources are quarantined until it "
                             "completes (QuarantineUntilComplete)"
                           : "cancelled natively (NativeCancel)");
           return o;
         }});
  }
  {
    auto outcome = [](uint32_t) {
      return Fails(kInvalid,
                   "$backend all_to_all_v on world: members disagree on the "
                   "counts: member 0 (rank 0) sends 1 rows to member 1 (rank "
                   "1), which expects 2 from it; nothing moved");
    };
    cases.push_back({"AllToAllVCountsThatDoNotPairAreRefusedByEveryMember",
                     2,
                     {},
                     [](uint32_t r) {
                       RankCall c =
                           Call(Operation::kAllToAllV, {2}, Iota(2, 0));
                       c.send_counts = {1, 1};
                       // Rank 0 sends rank 1 one row; rank 1 expects 2.
                       c.receive_counts = r == 0 ? std::vector<size_t>{1, 1}
                                                 : std::vector<size_t>{2, 1};
                       return c;
                     },
                     outcome});
  }
  SessionSetup verify;
  verify.verify_agreement = true;
  cases.push_back(
      {"CollectivesThatDisagreeAreRefusedBeforeThePayload", 2, verify,
       [](uint32_t r) {
         return Call(Operation::kAllReduceSum, {r == 0 ? 2u : 3u},
                     Iota(r == 0 ? 2 : 3, 0));
       },
       [](uint32_t r) {
         return Fails(
             kInvalid,
             "$backend all_reduce_sum on world: members disagree on "
             "the operation, dtype or shape: rank " +
                 std::to_string(r) + " submitted `all_reduce_sum f32[" +
                 (r == 0 ? "2" : "3") + "]`; rank " + std::to_string(1 - r) +
                 " submitted another one; nothing moved");
       }});
}

// --- Values with no rows (docs/contract.md, "Empty values"): a zero
// leading extent is valid for every operation, and such a value takes part
// like any other: it pairs with its peers' calls, waits for a peer that
// never makes one, and never shifts a group's or a route's order.

void AddNoRowCases(std::vector<ConformanceCase>& cases) {
  cases.push_back({"AllReduceSumOfNoRowsGivesNoRows",
                   2,
                   {},
                   [](uint32_t) {
                     return Call(Operation::kAllReduceSum, {0, 3});
                   },
                   [](uint32_t) {
                     return Completes({0, 3}, {});
                   }});
  cases.push_back({"AllToAllVOfNoRowsAnywhere",
                   2,
                   {},
                   [](uint32_t) {
                     RankCall c = Call(Operation::kAllToAllV, {0, 2});
                     c.send_counts = {0, 0};
                     c.receive_counts = {0, 0};
                     return c;
                   },
                   [](uint32_t) {
                     return Completes({0, 2}, {});
                   }});
  // Rank 0 sends no rows, then two; rank 1 receives them in that order.
  cases.push_back({"SendsOfNoRowsPairAndKeepTheRouteInStep",
                   2,
                   {},
                   [](uint32_t r) {
                     RankCall c = r == 0 ? Call(Operation::kSend, {2}, {1, 2})
                                         : Call(Operation::kReceive, {2});
                     c.peer = 1 - r;
                     RankCall empty =
                         Call(r == 0 ? Operation::kSend : Operation::kReceive,
                              {0, 2});
                     empty.peer = 1 - r;
                     c.first = {empty, empty};
                     return c;
                   },
                   [](uint32_t) {
                     return Completes({2}, {1, 2});
                   }});
  cases.push_back({"BatchesOfNoRowsPairAndKeepTheRoutesInStep",
                   3,
                   {},
                   [](uint32_t r) {
                     RankCall c = Call(Operation::kBatchSendReceive, {2},
                                       Iota(2, 10.0f * r));
                     c.peer = (r + 1) % 3;
                     c.source = (r + 2) % 3;
                     RankCall empty = c;
                     empty.shape = {0, 2};
                     empty.values = {};
                     c.first = {empty};
                     return c;
                   },
                   [](uint32_t r) {
                     const float from = 10.0f * ((r + 2) % 3);
                     return Completes({2}, {from, from + 1});
                   }});
  // Rank 0 never makes the call rank 1 makes with no rows: rank 1 waits
  // for it, as for any other value, and its deadline names rank 0. Both
  // ranks first connect the call's scope with one all_reduce_sum (the
  // world for a route), so that the wait is the call's own and not a
  // communicator's first connection (AFirstOperationWaits...).
  SessionSetup short_timeout;
  short_timeout.op_timeout = absl::Seconds(2);
  auto alone = [](RankCall call, CollectiveScope warm_scope) {
    return [call, warm_scope](uint32_t r) {
      RankCall warm = Call(Operation::kAllReduceSum, {1}, {1});
      warm.scope = warm_scope;
      RankCall c = r == 0 ? Call(Operation::kNone, {}) : call;
      c.first = {warm};
      return c;
    };
  };
  // How rank 1's deadline ends, naming rank 0, the operation's number on
  // the scope it waited on, and that scope.
  auto names_rank_0 = [](int operation, const std::string& scope) {
    return [operation, scope](uint32_t r) {
      if (r == 0) return Ignored();
      RankOutcome o = Fails(absl::StatusCode::kDeadlineExceeded,
                            absl::StrCat("rank 0 did not report operation #",
                                         operation, " on ", scope,
                                         " within 2s (behind, stalled, or "
                                         "never submitted it)"));
      o.message_is_suffix = true;
      return o;
    };
  };
  const CollectiveScope world = CollectiveScope::World();
  RankCall receive = Call(Operation::kReceive, {0, 2});
  receive.peer = 0;
  cases.push_back({"AReceiveOfNoRowsWaitsForItsSend", 2, short_timeout,
                   alone(receive, world),
                   names_rank_0(0, "route 0->1 in world")});
  RankCall batch = Call(Operation::kBatchSendReceive, {0, 2});
  batch.peer = 0;
  batch.source = 0;
  cases.push_back({"ABatchOfNoRowsWaitsForItsPeer", 2, short_timeout,
                   alone(batch, world),
                   names_rank_0(0, "route 0->1 in world")});
  cases.push_back({"AnAllReduceSumOfNoRowsWaitsForEveryMember", 2,
                   short_timeout,
                   alone(Call(Operation::kAllReduceSum, {0, 2}), world),
                   names_rank_0(1, "world")});
  // On a group, the deadline names the group (group 8: see
  // AnAllToAllVRefusedOnAGroupIsToldToThatGroup).
  RankCall on_group = Call(Operation::kAllReduceSum, {0, 2});
  on_group.scope = CollectiveScope::Group(8);
  cases.push_back({"AnAllReduceSumOnAGroupWaitsForEveryMember", 2,
                   short_timeout, alone(on_group, CollectiveScope::Group(8)),
                   names_rank_0(1, "group 8")});
  cases.push_back({"AnAllGatherOfNoRowsWaitsForEveryMember", 2, short_timeout,
                   alone(Call(Operation::kAllGather, {0, 2}), world),
                   names_rank_0(1, "world")});

  // Without the warm-up the call is the world communicator's first
  // operation: the one place where the backends still differ.
  cases.push_back(
      {"AFirstOperationWaitsForAMemberThatNeverSubmits",
       2,
       short_timeout,
       [](uint32_t r) {
         return r == 0 ? Call(Operation::kNone, {})
                       : Call(Operation::kAllReduceSum, {2}, {1, 2});
       },
       names_rank_0(0, "world"),
       {{"nccl",
         {[names_rank_0](uint32_t r) {
            RankOutcome o = names_rank_0(0, "world")(r);
            if (o.when == When::kFails) o.when = When::kRefused;
            return o;
          },
          "NCCL connects a communicator to its peers inside its first launch "
          "(a non-blocking communicator's group end stays ncclInProgress "
          "until every member joined), so a communicator's first submission "
          "itself waits, bounded by op_timeout, for a member that never "
          "submits, and is refused instead of failing in its completion; "
          "once connected (the other *WaitsFor* and AMissedBoundedWait* "
          "cases warm up first) NCCL meets the table. Taking that wait out "
          "of the submit path is issue 34's first defect."}}}});
}

}  // namespace

std::string ForBackend(const std::string& message, const std::string& backend) {
  return absl::StrReplaceAll(message, {{"$backend", backend}});
}

// --- Sessions by domain (dataplane/domain_groups.h): tp 2 x dp 2 on 4
// ranks; a session holds its domain's groups only. The groups of rank r
// (common/topology.h's ids): world 1, tensor 2 + r/2, pipeline 4 + r,
// expert 8 + r, data 12 + r%2.

void AddDomainCases(std::vector<ConformanceCase>& cases) {
  SessionSetup by_domain;
  by_domain.domain_size = 2;
  cases.push_back(
      {"ByDomainTheTensorGroupSumsWithinItsReplica", 4, by_domain,
       [](uint32_t r) {
         RankCall c =
             Call(Operation::kAllReduceSum, {2}, {1.0f + r, 10.0f * r});
         c.scope = CollectiveScope::Group(2 + r / 2);
         return c;
       },
       [](uint32_t r) {
         return r < 2 ? Completes({2}, {3, 10}) : Completes({2}, {7, 50});
       }});
  cases.push_back(
      {"ByDomainTheWorldIsRefusedNamingTheControlPlanesRound", 4, by_domain,
       [](uint32_t) { return Call(Operation::kAllReduceSum, {1}, {1}); },
       [](uint32_t r) {
         const uint32_t d = r / 2;
         return Refused(
             absl::StatusCode::kFailedPrecondition,
             absl::StrCat(
                 "$backend backend: all_reduce_sum on world refused: the job "
                 "recovers by data-parallel domain and this session holds "
                 "only domain ",
                 d, " (ranks ", 2 * d, "-", 2 * d + 1, ")'s groups (", 2 + d,
                 ", ", 4 + r, ", ", 8 + r,
                 "); the world spans every domain and is not connected, so "
                 "that a replica re-forms alone; exchange world-wide through "
                 "the control plane's all_gather_words "
                 "(Client::AllGatherWordsWithView: its result names the "
                 "domains it spans)"));
       }});
  cases.push_back(
      {"ByDomainADataParallelGroupIsRefusedNamingItsDomains", 4, by_domain,
       [](uint32_t r) {
         RankCall c = Call(Operation::kAllGather, {1}, {1});
         c.scope = CollectiveScope::Group(12 + r % 2);
         return c;
       },
       [](uint32_t r) {
         const uint32_t d = r / 2;
         return Refused(
             absl::StatusCode::kFailedPrecondition,
             absl::StrCat(
                 "$backend backend: all_gather on group ", 12 + r % 2,
                 " refused: the job recovers by data-parallel domain and "
                 "this session holds only domain ",
                 d, " (ranks ", 2 * d, "-", 2 * d + 1, ")'s groups (", 2 + d,
                 ", ", 4 + r, ", ", 8 + r, "); group ", 12 + r % 2,
                 " (members ", r % 2, ", ", r % 2 + 2,
                 ") spans domains 0 and 1 and is not connected, so that a "
                 "replica re-forms alone; exchange world-wide through the "
                 "control plane's all_gather_words "
                 "(Client::AllGatherWordsWithView: its result names the "
                 "domains it spans)"));
       }});
}

const std::vector<ConformanceCase>& Cases() {
  static const std::vector<ConformanceCase> cases = [] {
    std::vector<ConformanceCase> all;
    AddValueCases(all);
    AddRefusalCases(all);
    AddToldRefusalCases(all);
    AddCapabilityCases(all);
    AddPoisonCases(all);
    AddFailureCases(all);
    AddNoRowCases(all);
    AddDomainCases(all);
    return all;
  }();
  return cases;
}

}  // namespace rankd::dataplane::conformance
