#include <gtest/gtest.h>

#include <filesystem>

#include "core/cost_model.h"
#include "core/errors.h"
#include "core/json_reader.h"
#include "core/known_names.h"
#include "core/trace.h"
#include "support/trace_fixture.h"

namespace headroom {
namespace {

using core::InputError;
using nlohmann::json;

// The message of the InputError that reading `document` throws ("" if it reads fine).
std::string read_error(const json& document) {
  try {
    core::trace_from_json(document, "t.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(TraceJson, RoundTripKeepsEveryField) {
  const core::Trace trace = testing::make_small_trace();
  const json document = core::to_json(trace);
  EXPECT_EQ(document["schema"], "headroom.trace/1");
  EXPECT_EQ(document["model"]["config"]["depth"], 1);  // numbers stay numbers for scripts
  EXPECT_EQ(document["model"]["config"]["note"], "text value");
  const core::Trace back = core::trace_from_json(json::parse(document.dump()));
  EXPECT_EQ(back, trace);
  // fp32, the default, is what a trace without "precision" was measured in; another is written.
  EXPECT_FALSE(document.contains("precision"));
  core::Trace autocast = trace;
  autocast.precision = core::Precision::Bf16Autocast;
  EXPECT_EQ(core::to_json(autocast)["precision"], "bf16-autocast");
  EXPECT_EQ(core::trace_from_json(json::parse(core::to_json(autocast).dump())), autocast);
}

// A trace of several precisions holds the others whole; each is measured once, of the same model,
// with no further ones of its own; a plan's precision picks its trace.
TEST(TraceJson, OtherPrecisionsRoundTripAndAreChecked) {
  core::Trace trace = testing::make_small_trace();
  core::Trace bf16 = trace;
  bf16.precision = core::Precision::Bf16;
  bf16.layers[0].param_bytes /= 2;
  trace.other_precisions.push_back(bf16);
  const json document = core::to_json(trace);
  ASSERT_EQ(document["other_precisions"].size(), 1u);
  EXPECT_EQ(core::trace_from_json(json::parse(document.dump())), trace);
  EXPECT_EQ(core::trace_from_json(document).in_precision(core::Precision::Bf16)->layers[0].param_bytes,
            bf16.layers[0].param_bytes);
  EXPECT_EQ(trace.in_precision(core::Precision::Fp32), &trace);
  EXPECT_EQ(trace.in_precision(core::Precision::Bf16Autocast), nullptr);
  EXPECT_EQ(trace.precision_list(), "fp32, bf16");

  json twice = document;
  twice["other_precisions"].push_back(document["other_precisions"][0]);
  EXPECT_NE(read_error(twice).find("$.other_precisions[1]: precision bf16 is measured twice"), std::string::npos) << read_error(twice);
  json own = document;
  own["other_precisions"][0]["precision"] = "fp32";
  EXPECT_NE(read_error(own).find("precision fp32 is measured twice"), std::string::npos) << read_error(own);
  json nested = document;
  nested["other_precisions"][0]["other_precisions"] = json::array();
  EXPECT_NE(read_error(nested).find("holds no further ones"), std::string::npos) << read_error(nested);
  json other_model = document;
  other_model["other_precisions"][0]["layers"][0]["name"] = "elsewhere";
  EXPECT_NE(read_error(other_model).find("$.other_precisions[0].layers: expected the same model's layers"), std::string::npos)
      << read_error(other_model);
  json threads = document;
  threads["other_precisions"][0]["profile"]["threads"] = 7;
  EXPECT_NE(read_error(threads).find("$.other_precisions[0].profile.threads: expected the trace's own threads"), std::string::npos)
      << read_error(threads);
  json device = document;
  device["other_precisions"][0]["device"]["name"] = "elsewhere";
  EXPECT_NE(read_error(device).find("$.other_precisions[0].device: expected the trace's own device"), std::string::npos)
      << read_error(device);
  json broken = document;
  broken["other_precisions"][0]["batch_sizes"] = json::array();
  EXPECT_NE(read_error(broken).find("$.other_precisions[0].batch_sizes"), std::string::npos) << read_error(broken);
}

TEST(TraceJson, FileRoundTrip) {
  const auto path = std::filesystem::temp_directory_path() / "headroom_trace_roundtrip.json";
  const core::Trace trace = testing::make_small_trace();
  core::write_trace_file(path, trace);
  EXPECT_EQ(core::read_trace_file(path), trace);
  std::filesystem::remove(path);
}

TEST(TraceJson, MalformedJsonNamesFileAndPosition) {
  try {
    core::parse_json("{\"schema\": \"headroom.trace/1\",\n \"model\": }", "bad.json");
    FAIL() << "malformed JSON was accepted";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("bad.json: malformed JSON"), std::string::npos) << message;
    EXPECT_NE(message.find("line 2"), std::string::npos) << message;
  }
}

TEST(TraceJson, TruncatedDocumentIsRejected) {
  const std::string text = core::to_json(testing::make_small_trace()).dump();
  for (const std::size_t cut : {text.size() / 3, text.size() / 2, text.size() - 1}) {
    EXPECT_THROW(core::parse_json(text.substr(0, cut), "cut.json"), InputError) << "cut at " << cut;
  }
}

// Found by fuzzing: nlohmann throws out_of_range, not parse_error, for a number past a double's range.
TEST(TraceJson, NumberOutOfRangeIsAnInputError) {
  try {
    core::parse_json("{\"schema\": \"headroom.trace/1\", \"x\": 4e573}", "huge.json");
    FAIL() << "a number past a double's range was accepted";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("huge.json: malformed JSON: ", 0), 0u) << message;
    EXPECT_NE(message.find("4e573"), std::string::npos) << message;
  }
}

TEST(TraceJson, WrongTypeNamesThePath) {
  json document = core::to_json(testing::make_small_trace());
  document["layers"][1]["samples"][0]["fwd_ns"] = "12";
  EXPECT_EQ(read_error(document), "t.json: $.layers[1].samples[0].fwd_ns: expected a non-negative integer, got string");
}

TEST(TraceJson, EachProblemNamesItsPath) {
  const json good = core::to_json(testing::make_small_trace());
  struct Case {
    std::function<void(json&)> spoil;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](json& d) { d["schema"] = "headroom.plan/1"; }, "$.schema: expected \"headroom.trace/1\""},
      {[](json& d) { d.erase("schema"); }, "$.schema: missing"},
      {[](json& d) { d["layers"][0].erase("kind"); }, "$.layers[0].kind: missing"},
      {[](json& d) { d["layers"][2]["param_bytes"] = -5; }, "$.layers[2].param_bytes: expected a non-negative integer, got -5"},
      {[](json& d) { d["layers"][0]["inputs"][0] = 2; }, "$.layers[0].inputs[0]: input 2 is not an earlier layer"},
      {[](json& d) { d["precision"] = "fp8"; }, "$.precision: 'fp8' is not a precision (known: fp32, bf16-autocast"},
      // -3 .. -17 are a model's further inputs; past them nothing is.
      {[](json& d) { d["layers"][0]["inputs"][0] = -18; }, "$.layers[0].inputs[0]: input -18 is not an earlier layer"},
      {[](json& d) { d["layers"][1]["id"] = 7; }, "$.layers[1].id: expected 1"},
      {[](json& d) { d["layers"][1]["samples"].erase(1); }, "$.layers[1].samples: expected one sample per batch size"},
      {[](json& d) { d["layers"][2]["samples"][1]["batch"] = 3; }, "$.layers[2].samples[1].batch: expected 2"},
      {[](json& d) { d["layers"][2]["saves_inputs"] = json::array({true}); }, "$.layers[2].saves_inputs: expected one entry per input"},
      {[](json& d) { d["batch_sizes"] = json::array({2, 1}); }, "$.batch_sizes[1]: batch sizes must be strictly ascending"},
      {[](json& d) { d["device"]["kind"] = "tpu"; }, "$.device.kind: expected \"cpu\" or \"cuda\""},
      {[](json& d) { d["steps"] = json::object(); }, "$.steps: expected an array, got object"},
      {[](json& d) { d["layers"] = json::array(); }, "$.layers: expected at least one layer"},
      {[](json& d) { d["optimizer"]["state_bytes_per_param"] = "8"; }, "$.optimizer.state_bytes_per_param: expected a number, got string"},
      {[](json& d) { d = json::array(); }, "$: expected an object, got array"},
  };
  for (const auto& c : cases) {
    json document = good;
    c.spoil(document);
    const std::string message = read_error(document);
    EXPECT_EQ(message.rfind("t.json: " + c.expected, 0), 0u) << "got: " << message << "\nwanted: " << c.expected;
  }
}

// Names both sides must agree on: an optimizer nothing builds or a layer kind the zoo never makes
// (a misspelt "batchnorm" would hide the BatchNorm notes) is refused where it is read, naming the
// known ones. A TorchScript module's layers are named after its classes: any kind reads.
TEST(TraceJson, UnknownNamesAreRefusedWithTheKnownOnes) {
  const json good = core::to_json(testing::make_small_trace());
  json optimizer = good;
  optimizer["optimizer"]["name"] = "rmsprop";
  EXPECT_EQ(read_error(optimizer), "t.json: $.optimizer.name: unknown optimizer 'rmsprop' (known: sgd, "
                 "sgd(momentum=M), adam, adam(amsgrad), adamw, adamw(amsgrad))");
  json kind = good;
  kind["layers"][1]["kind"] = "BatchNorm";
  const std::string message = read_error(kind);
  EXPECT_EQ(message.rfind("t.json: $.layers[1].kind: unknown layer kind 'BatchNorm' for a zoo model (known: add, attention, "
                          "batchnorm, ",
                          0),
            0u)
      << message;
  json module = kind;
  module["model"]["file"] = {{"path", "net.pt"}, {"sha256", std::string(64, 'a')}};
  module["layers"][1]["kind"] = "MyBlock (batchnorm)";
  EXPECT_EQ(read_error(module), "");
  // Every kind the zoo makes, as the committed traces hold them, reads.
  for (const auto name : core::kZooLayerKinds) {
    json zoo = good;
    zoo["layers"][1]["kind"] = std::string(name);
    EXPECT_EQ(read_error(zoo), "") << name;
  }
}

// Found by fuzzing: values within int64 but past any real measurement overflowed the planner's
// sums (a 2^62-byte input, 2^62 parameter bytes, a -2^62 retained change); ids and block indexes
// past int's range wrapped to accepted ones. The reader now rejects them, naming the path.
TEST(TraceJson, ValuesPastTheTraceLimitsAreRejected) {
  const json good = core::to_json(testing::make_small_trace());
  const std::int64_t huge = std::int64_t{1} << 62;
  struct Case {
    std::function<void(json&)> spoil;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[&](json& d) { d["steps"][1]["input_bytes"] = huge; }, "$.steps[1].input_bytes: expected at most 17592186044416 bytes"},
      {[&](json& d) { d["layers"][0]["param_bytes"] = core::kMaxTraceBytes + 1; }, "$.layers[0].param_bytes: expected at most"},
      {[&](json& d) { d["layers"][1]["samples"][0]["fwd_retained_bytes"] = -huge; },
       "$.layers[1].samples[0].fwd_retained_bytes: expected an integer from -17592186044416 to 17592186044416, got -4611686018427387904"},
      {[&](json& d) { d["layers"][1]["samples"][1]["bwd_ns"] = huge; }, "$.layers[1].samples[1].bwd_ns: expected at most 17592186044416 ns"},
      {[&](json& d) { d["steps"][0]["step_ns"] = huge; }, "$.steps[0].step_ns: expected at most"},
      {[&](json& d) { d["optimizer"]["state_bytes"] = huge; }, "$.optimizer.state_bytes: expected at most"},
      {[&](json& d) {
         d["batch_sizes"][1] = core::kMaxTraceBatch + 1;
       },
       "$.batch_sizes[1]: expected a batch size of at most 1048576"},
      {[](json& d) { d["layers"][1]["id"] = (std::int64_t{1} << 32) + 1; }, "$.layers[1].id: expected 1 (ids are the layer's position), got 4294967297"},
      {[](json& d) { d["layers"][1]["block"] = std::int64_t{1} << 32; }, "$.layers[1].block: expected -1 (no block) or a block index below 16384"},
  };
  for (const auto& c : cases) {
    json document = good;
    c.spoil(document);
    const std::string message = read_error(document);
    EXPECT_EQ(message.rfind("t.json: " + c.expected, 0), 0u) << "got: " << message << "\nwanted: " << c.expected;
  }
  // At the limits it reads.
  json at_limits = good;
  at_limits["steps"][1]["input_bytes"] = core::kMaxTraceBytes;
  at_limits["layers"][1]["samples"][0]["fwd_retained_bytes"] = -core::kMaxTraceBytes;
  at_limits["layers"][1]["samples"][1]["bwd_ns"] = core::kMaxTraceNs;
  EXPECT_EQ(read_error(at_limits), "");
  json too_many = good;
  for (std::int64_t i = 3; i <= core::kMaxTraceLayers; ++i) {
    json layer = good["layers"][1];
    layer["id"] = i;
    layer["inputs"] = json::array({i - 1});
    too_many["layers"].push_back(layer);
  }
  EXPECT_EQ(read_error(too_many).rfind("t.json: $.layers: expected at most 16384 layers, got 16385", 0), 0u) << read_error(too_many);
}

TEST(TraceJson, CudaTraceRoundTripKeepsGpuFields) {
  const core::Trace trace = testing::make_small_cuda_trace();
  const json document = core::to_json(trace);
  EXPECT_EQ(document["device"]["sm_count"], 132);
  EXPECT_EQ(document["layers"][1]["samples"][0]["gpu"]["bwd_kernels"], 3);
  EXPECT_EQ(document["steps"][1]["gpu"]["peak_reserved_bytes"], 8 << 20);
  EXPECT_EQ(core::trace_from_json(json::parse(document.dump())), trace);
  // A CPU trace writes none of them.
  const json cpu = core::to_json(testing::make_small_trace());
  EXPECT_FALSE(cpu["device"].contains("sm_count"));
  EXPECT_FALSE(cpu["layers"][0]["samples"][0].contains("gpu"));
  EXPECT_FALSE(cpu["steps"][0].contains("gpu"));
}

TEST(TraceJson, CudaProblemsNameTheirPath) {
  const json good = core::to_json(testing::make_small_cuda_trace());
  struct Case {
    std::function<void(json&)> spoil;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](json& d) { d["layers"][1]["samples"][0].erase("gpu"); }, "$.layers[1].samples[0]: missing \"gpu\""},
      {[](json& d) { d["layers"][0]["samples"][1]["gpu"]["fwd_kernels"] = -1; },
       "$.layers[0].samples[1].gpu.fwd_kernels: expected a non-negative integer"},
      {[](json& d) { d["steps"][0]["gpu"].erase("kernel_ns"); }, "$.steps[0].gpu.kernel_ns: missing"},
      {[](json& d) { d["device"].erase("sm_count"); }, "$.device.sm_count: missing"},
      {[](json& d) { d["device"]["host_to_device_bytes_per_s"] = 0; },
       "$.device.host_to_device_bytes_per_s: expected a positive bandwidth"},
      {[](json& d) { d["device"]["kind"] = "cpu"; }, "$.layers[0].samples[0].gpu: unexpected in a CPU trace"},
  };
  for (const auto& c : cases) {
    json document = good;
    c.spoil(document);
    const std::string message = read_error(document);
    EXPECT_EQ(message.rfind("t.json: " + c.expected, 0), 0u) << "got: " << message << "\nwanted: " << c.expected;
  }
}

TEST(TraceJson, MissingFileIsAnInputError) {
  EXPECT_THROW(core::read_trace_file("/nonexistent/trace.json"), InputError);
}

TEST(TraceJson, TempoProfilesRoundTripAndComeInPairs) {
  const core::Trace trace = testing::make_small_tempo_trace();
  const json document = core::to_json(trace);
  EXPECT_EQ(document["layers"][1]["tempo"]["saves_inputs"], json::array({false}));
  EXPECT_EQ(document["layers"][1]["tempo"]["samples"].size(), 2u);
  EXPECT_FALSE(document["layers"][0].contains("tempo"));
  EXPECT_EQ(document["tempo_steps"].size(), 2u);
  EXPECT_EQ(core::trace_from_json(json::parse(document.dump())), trace);
  EXPECT_FALSE(core::to_json(testing::make_small_trace()).contains("tempo_steps"));

  struct Case {
    std::function<void(json&)> spoil;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](json& d) { d.erase("tempo_steps"); }, "$: missing \"tempo_steps\""},
      {[](json& d) { d["layers"][1].erase("tempo"); }, "$.tempo_steps: unexpected: no layer has a \"tempo\" profile"},
      {[](json& d) { d["layers"][1]["tempo"]["saves_inputs"] = json::array({false, true}); },
       "$.layers[1].tempo.saves_inputs: expected one entry per input (1), got 2"},
      {[](json& d) { d["layers"][1]["tempo"]["samples"].erase(1); },
       "$.layers[1].tempo.samples: expected one sample per batch size (2), got 1"},
      {[](json& d) { d["tempo_steps"][0]["batch"] = 2; }, "$.tempo_steps[0].batch: expected 1 (batch_sizes order)"},
  };
  for (const auto& c : cases) {
    json spoilt = document;
    c.spoil(spoilt);
    const std::string message = read_error(spoilt);
    EXPECT_EQ(message.rfind("t.json: " + c.expected, 0), 0u) << "got: " << message << "\nwanted: " << c.expected;
  }
}

TEST(TraceJson, CheckpointedPassRoundTripsWithOneEntryPerBatchSize) {
  core::Trace trace = testing::make_small_trace();
  trace.layers[1].checkpointed = {{.batch = 1, .recompute_transient_bytes = 48, .recompute_extra_bytes = 0, .bwd_transient_bytes = 96},
                                  {.batch = 2, .recompute_transient_bytes = 80, .recompute_extra_bytes = 8, .bwd_transient_bytes = 160}};
  trace.layers[1].keeps_output = true;
  const json document = core::to_json(trace);
  EXPECT_EQ(document["layers"][1]["checkpointed"].size(), 2u);
  EXPECT_FALSE(document["layers"][0].contains("checkpointed"));  // traces without the pass read as before
  EXPECT_EQ(core::trace_from_json(json::parse(document.dump())), trace);

  struct Case {
    std::function<void(json&)> spoil;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](json& d) { d["layers"][1]["checkpointed"].erase(1); },
       "$.layers[1].checkpointed: expected one entry per batch size (2), got 1"},
      {[](json& d) { d["layers"][1]["checkpointed"][1]["batch"] = 4; },
       "$.layers[1].checkpointed[1].batch: expected 2 (batch_sizes order)"},
      {[](json& d) { d["layers"][1]["checkpointed"][0]["bwd_transient_bytes"] = -1; },
       "$.layers[1].checkpointed[0].bwd_transient_bytes:"},
      {[](json& d) { d["layers"][1]["checkpointed"][0].erase("recompute_extra_bytes"); },
       "$.layers[1].checkpointed[0].recompute_extra_bytes: missing"},
      {[](json& d) { d["layers"][1]["checkpointed"] = 3; }, "$.layers[1].checkpointed:"},
      {[](json& d) { d["layers"][1].erase("keeps_output"); }, "$.layers[1].keeps_output: missing"},
  };
  for (const auto& c : cases) {
    json spoilt = document;
    c.spoil(spoilt);
    const std::string message = read_error(spoilt);
    EXPECT_EQ(message.rfind("t.json: " + c.expected, 0), 0u) << "got: " << message << "\nwanted: " << c.expected;
  }
}

TEST(TraceJson, HostMemoryRegimeRoundTripsAndOldTracesReadWithout) {
  core::Trace trace = testing::make_small_trace();
  trace.host_memory_regime = "glibc 2.36 malloc, mmap_threshold=1073741824, trim_threshold=1073741824";
  const json document = core::to_json(trace);
  EXPECT_EQ(document["host_memory"]["regime"], trace.host_memory_regime);
  EXPECT_EQ(core::trace_from_json(json::parse(document.dump())), trace);

  // A trace from before regimes were recorded has no field and reads as unrecorded.
  json old = document;
  old.erase("host_memory");
  EXPECT_EQ(core::trace_from_json(old).host_memory_regime, "");
  EXPECT_FALSE(core::to_json(core::trace_from_json(old)).contains("host_memory"));

  json empty = document;
  empty["host_memory"]["regime"] = "";
  EXPECT_NE(read_error(empty).find("$.host_memory.regime: expected a non-empty regime"), std::string::npos) << read_error(empty);
}

// A CPU trace's memcpy bandwidth (L2L's copies): round-trips, older traces read without
// it (copies untimed), and a bad value names its path.
TEST(TraceJson, CpuCopyBandwidthRoundTripsAndOldTracesReadWithout) {
  core::Trace trace = testing::make_small_trace();
  ASSERT_FALSE(trace.device.is_cuda());
  trace.device.host_to_device_bytes_per_s = trace.device.device_to_host_bytes_per_s = 2e10;
  const json document = core::to_json(trace);
  EXPECT_EQ(document["device"]["host_to_device_bytes_per_s"], 2e10);
  EXPECT_FALSE(document["device"].contains("sm_count"));
  EXPECT_EQ(core::trace_from_json(json::parse(document.dump())), trace);
  json old = document;
  old["device"].erase("host_to_device_bytes_per_s");
  old["device"].erase("device_to_host_bytes_per_s");
  EXPECT_EQ(core::trace_from_json(old).device.host_to_device_bytes_per_s, 0);
  EXPECT_FALSE(core::to_json(core::trace_from_json(old))["device"].contains("host_to_device_bytes_per_s"));
  for (const double bad : {0.0, -1.0, 1e300}) {
    json spoiled = document;
    spoiled["device"]["device_to_host_bytes_per_s"] = bad;
    EXPECT_NE(read_error(spoiled).find("$.device.device_to_host_bytes_per_s: expected a positive bandwidth"), std::string::npos)
        << read_error(spoiled);
  }
  json half = document;
  half["device"].erase("device_to_host_bytes_per_s");
  EXPECT_NE(read_error(half).find("$.device.device_to_host_bytes_per_s: missing"), std::string::npos) << read_error(half);
}

// The copy latency beside the bandwidth: round-trips, a trace from before it reads as 0 (copies
// timed by bandwidth alone), a bad value names its path; a copy costs its latency plus its bytes.
TEST(TraceJson, CopyLatencyRoundTripsAndTimesEachCopy) {
  core::Trace trace = testing::make_small_trace();
  trace.device.host_to_device_bytes_per_s = trace.device.device_to_host_bytes_per_s = 1e9;
  trace.device.host_to_device_latency_ns = 1500;
  trace.device.device_to_host_latency_ns = 2500;
  const json document = core::to_json(trace);
  EXPECT_EQ(document["device"]["host_to_device_latency_ns"], 1500);
  EXPECT_EQ(core::trace_from_json(json::parse(document.dump())), trace);
  json old = document;
  old["device"].erase("host_to_device_latency_ns");
  old["device"].erase("device_to_host_latency_ns");
  EXPECT_EQ(core::trace_from_json(old).device.host_to_device_latency_ns, 0);
  for (const json bad : {json(-1), json(2e10), json("1us"), json(1.5)}) {
    json spoiled = document;
    spoiled["device"]["device_to_host_latency_ns"] = bad;
    EXPECT_NE(read_error(spoiled).find("$.device.device_to_host_latency_ns"), std::string::npos) << read_error(spoiled);
  }
  // 1 MB at 1 GB/s is 1 ms; each copy adds its latency; nothing moved, or no bandwidth, costs nothing.
  EXPECT_EQ(trace.device.host_to_device_ns(1'000'000), 1'000'000 + 1500);
  EXPECT_EQ(trace.device.device_to_host_ns(1'000'000, 4), 1'000'000 + 4 * 2500);
  EXPECT_EQ(trace.device.host_to_device_ns(0), 0);
  trace.device.host_to_device_bytes_per_s = 0;
  EXPECT_EQ(trace.device.host_to_device_ns(1'000'000), 0);
}

TEST(TraceJson, StepSequencesRoundTripAndComeForEveryStepOrNone) {
  core::Trace trace = testing::make_small_trace();
  trace.steps[0].sequence = core::StepSequence{.micro_batch_ns = 7000, .first_micro_batch_ns = 7400, .zero_grad_ns = 30};
  trace.steps[1].sequence =
      core::StepSequence{.micro_batch_ns = 12000, .first_micro_batch_ns = 12500, .zero_grad_ns = 31, .timed_sequences = 23,
                         .micro_batch_error = 0.0125};
  const json document = core::to_json(trace);
  EXPECT_EQ(document["steps"][1]["sequence"]["first_micro_batch_ns"], 12500);
  EXPECT_EQ(document["steps"][1]["sequence"]["timed_sequences"], 23);
  EXPECT_EQ(document["steps"][1]["sequence"]["micro_batch_error"], 0.0125);
  // Traces from before the count and the error were kept have neither, and still read.
  EXPECT_FALSE(document["steps"][0]["sequence"].contains("timed_sequences"));
  EXPECT_FALSE(document["steps"][0]["sequence"].contains("micro_batch_error"));
  EXPECT_EQ(core::trace_from_json(json::parse(document.dump())), trace);

  json one_missing = document;
  one_missing["steps"][1].erase("sequence");
  EXPECT_NE(read_error(one_missing).find("$.steps[1]: missing \"sequence\""), std::string::npos) << read_error(one_missing);
  json negative = document;
  negative["steps"][0]["sequence"]["zero_grad_ns"] = -1;
  EXPECT_NE(read_error(negative).find("$.steps[0].sequence.zero_grad_ns"), std::string::npos) << read_error(negative);
  json fractional = document;
  fractional["steps"][1]["sequence"]["timed_sequences"] = 2.5;
  EXPECT_NE(read_error(fractional).find("$.steps[1].sequence.timed_sequences"), std::string::npos) << read_error(fractional);
  for (const double error : {-0.01, 1.5}) {
    json out_of_range = document;
    out_of_range["steps"][1]["sequence"]["micro_batch_error"] = error;
    EXPECT_NE(read_error(out_of_range).find("$.steps[1].sequence.micro_batch_error: expected a relative error from 0 to 1"),
              std::string::npos)
        << read_error(out_of_range);
  }
}

// How long the timing rounds ran is kept with the other profile settings; traces from before it
// was recorded have none and still read.
TEST(TraceJson, TimingSecondsRoundTripAndAreBounded) {
  core::Trace trace = testing::make_small_trace();
  EXPECT_FALSE(core::to_json(trace)["profile"].contains("timing_seconds"));
  EXPECT_EQ(core::trace_from_json(core::to_json(trace)), trace);
  trace.profile.timing_seconds = 10.5;
  const json document = core::to_json(trace);
  EXPECT_EQ(document["profile"]["timing_seconds"], 10.5);
  EXPECT_EQ(core::trace_from_json(json::parse(document.dump())), trace);
  for (const json bad : {json(-1), json(1e9), json("10s")}) {
    json spoiled = document;
    spoiled["profile"]["timing_seconds"] = bad;
    EXPECT_NE(read_error(spoiled).find("$.profile.timing_seconds"), std::string::npos) << read_error(spoiled);
  }
}

// The backward's transient with its inputs held (what L2L predicts its stages' first layers
// from): every sample has it or none does, it round-trips, and the cost model interpolates it as a
// transient, never below 0.
TEST(TraceJson, HeldInputTransientsRoundTripAndComeForEverySampleOrNone) {
  core::Trace trace = testing::make_small_trace();
  EXPECT_FALSE(trace.measures_inputs_held());
  for (auto& layer : trace.layers) {
    for (auto& sample : layer.samples) sample.bwd_inputs_held_extra_bytes = sample.batch * 100;
  }
  EXPECT_TRUE(trace.measures_inputs_held());
  const json document = core::to_json(trace);
  EXPECT_EQ(core::trace_from_json(json::parse(document.dump())), trace);
  const core::CostModel costs(trace);
  const auto at = [&](std::int64_t b) { return costs.layer(0, b).bwd_inputs_held_extra_bytes; };
  EXPECT_EQ(at(trace.batch_sizes.front()), trace.batch_sizes.front() * 100);
  EXPECT_EQ(at(trace.batch_sizes.back()), trace.batch_sizes.back() * 100);
  // Past the samples along the last segment: the held transient (64 + 100 a sample here) less the
  // plain one (64 a sample) at 3.
  EXPECT_EQ(at(3), 300);

  json one_missing = document;
  one_missing["layers"][1]["samples"][0].erase("bwd_inputs_held_extra_bytes");
  EXPECT_NE(read_error(one_missing).find("$.layers[1].samples[0]: missing \"bwd_inputs_held_extra_bytes\""), std::string::npos)
      << read_error(one_missing);
  json first_missing = document;
  first_missing["layers"][0]["samples"][0].erase("bwd_inputs_held_extra_bytes");
  EXPECT_NE(read_error(first_missing).find("$.layers[0].samples[1]: unexpected \"bwd_inputs_held_extra_bytes\""),
            std::string::npos)
      << read_error(first_missing);
  json negative = document;
  negative["layers"][0]["samples"][0]["bwd_inputs_held_extra_bytes"] = -5;
  EXPECT_NE(read_error(negative).find("$.layers[0].samples[0].bwd_inputs_held_extra_bytes"), std::string::npos)
      << read_error(negative);
  // Without it (traces from before), nothing is evaluated.
  EXPECT_FALSE(core::CostModel(testing::make_small_trace()).layer(0, 2).bwd_inputs_held_extra_bytes.has_value());
}

// A GPU trace's library workspace and host optimizer rate read back; a trace without them (every
// CPU trace) writes neither; out of range they are refused by path.
TEST(TraceJson, TheWorkspaceAndTheHostOptimizerRateRoundTripAndAreChecked) {
  core::Trace trace = testing::make_small_trace();
  const json plain = core::to_json(trace);
  EXPECT_FALSE(plain.contains("workspace_bytes"));
  EXPECT_FALSE(plain["optimizer"].contains("host_ns_per_param"));
  trace.workspace_bytes = std::int64_t{64} << 20;
  trace.optimizer.host_ns_per_param = 1.75;
  const json document = core::to_json(trace);
  EXPECT_EQ(document["workspace_bytes"], std::int64_t{64} << 20);
  EXPECT_EQ(document["optimizer"]["host_ns_per_param"], 1.75);
  EXPECT_EQ(core::trace_from_json(json::parse(document.dump())), trace);

  json negative = document;
  negative["workspace_bytes"] = -1;
  EXPECT_EQ(read_error(negative).rfind("t.json: $.workspace_bytes:", 0), 0u) << read_error(negative);
  for (const double rate : {0.0, -1.0, 2e9}) {
    json bad = document;
    bad["optimizer"]["host_ns_per_param"] = rate;
    EXPECT_EQ(read_error(bad), "t.json: $.optimizer.host_ns_per_param: expected a number above 0, at most 1e9") << rate;
  }
}

// A trace made from Python records the parameter tensors whose step counts torch.optim's Adam keeps
// (within its state); one without writes none, and counts past the state are refused.
TEST(TraceJson, TorchOptimsStepCountsRoundTripAndAreChecked) {
  core::Trace trace = testing::make_small_trace();
  EXPECT_FALSE(core::to_json(trace)["optimizer"].contains("torch_optim_tensors"));
  trace.optimizer.torch_optim_tensors = 6;
  EXPECT_EQ(trace.optimizer.step_count_bytes("adam"), 24);
  EXPECT_EQ(trace.optimizer.step_count_bytes("sgd(momentum=0)"), 0);
  const json document = core::to_json(trace);
  EXPECT_EQ(document["optimizer"]["torch_optim_tensors"], 6);
  EXPECT_EQ(core::trace_from_json(json::parse(document.dump())), trace);
  json bad = document;
  bad["optimizer"]["torch_optim_tensors"] = trace.optimizer.state_bytes;
  EXPECT_EQ(read_error(bad), "t.json: $.optimizer.torch_optim_tensors: its step counts alone take more than state_bytes");
}

// The measured link with the broadcast's, reduce's and gather's own lines (sharded steps are timed
// by them) and the share of a collective's time the compute beside it loses.
TEST(TraceJson, MeasuredCollectiveLinesRoundTripAndAreChecked) {
  core::Trace trace = testing::make_small_trace();
  trace.link = core::CollectiveLink{1e9, 100'000, "measured", {3e9, 160'000}, {}, {1.5e9, 400'000}, 1.25};
  json document = core::to_json(trace);
  EXPECT_TRUE(document["link"].contains("broadcast"));
  EXPECT_FALSE(document["link"].contains("reduce"));
  EXPECT_EQ(document["link"]["gather"]["latency_ns"], 400'000);
  EXPECT_EQ(document["link"]["beside_compute"], 1.25);
  EXPECT_EQ(core::trace_from_json(json::parse(document.dump())), trace);
  // A link measured before the share was: the collectives hide behind the compute, as they were planned then.
  document["link"].erase("beside_compute");
  EXPECT_EQ(core::trace_from_json(json::parse(document.dump())).link->beside_compute, 0);
  for (const json bad : {json(-0.5), json(2.5), json("all")}) {
    document["link"]["beside_compute"] = bad;
    EXPECT_NE(read_error(document).find("$.link.beside_compute"), std::string::npos) << read_error(document);
  }
  document["link"].erase("beside_compute");
  document["link"]["gather"]["latency_ns"] = -1;
  EXPECT_NE(read_error(document).find("$.link.gather.latency_ns"), std::string::npos) << read_error(document);
  document["link"].erase("gather");
  document["link"]["reduce"] = {{"bytes_per_second", 0}, {"latency_ns", 5}};
  EXPECT_NE(read_error(document).find("$.link.reduce.bytes_per_second"), std::string::npos) << read_error(document);
}

// The largest trainable tensor (what a sharded worker's optimizer temporaries are scaled by).
TEST(TraceJson, LargestParameterRoundTripsAndIsChecked) {
  core::Trace trace = testing::make_small_trace();
  EXPECT_FALSE(core::to_json(trace)["optimizer"].contains("largest_param_elements"));
  trace.optimizer.largest_param_elements = 4096;
  trace.optimizer.param_tensors = 3;
  const json document = core::to_json(trace);
  EXPECT_EQ(core::trace_from_json(json::parse(document.dump())), trace);
  json bad = document;
  bad["optimizer"]["largest_param_elements"] = 0;
  EXPECT_NE(read_error(bad).find("$.optimizer.largest_param_elements"), std::string::npos) << read_error(bad);
  bad = document;
  bad["optimizer"]["param_tensors"] = -1;
  EXPECT_NE(read_error(bad).find("$.optimizer.param_tensors"), std::string::npos) << read_error(bad);
}

}  // namespace
}  // namespace headroom

namespace headroom {
namespace {

// A module captured in eager PyTorch: its layers may have any kind, as a TorchScript module's do,
// and it has no file; a module scripted or traced from Python has its file.
TEST(TraceJson, AnEagerCaptureIsAUsersModule) {
  core::Trace trace = testing::make_small_trace();
  trace.model.capture = "eager";
  trace.layers[0].kind = "Linear";
  const core::Trace read = core::trace_from_json(core::to_json(trace));
  EXPECT_EQ(read, trace);
  EXPECT_TRUE(read.model.is_users_module());
  json lazy = core::to_json(trace);
  lazy["model"]["capture"] = "lazy";
  EXPECT_NE(read_error(lazy).find("$.model.capture: expected script, trace or eager"), std::string::npos) << read_error(lazy);
  json scripted = core::to_json(trace);
  scripted["model"]["capture"] = "script";
  EXPECT_NE(read_error(scripted).find("a script capture has its TorchScript file"), std::string::npos) << read_error(scripted);
  scripted["model"]["file"] = {{"path", "/m.pt"}, {"sha256", std::string(64, 'a')}};
  EXPECT_EQ(core::trace_from_json(scripted).model.capture, "script");
  json zoo = core::to_json(trace);
  zoo["model"].erase("capture");
  EXPECT_NE(read_error(zoo).find("unknown layer kind 'Linear' for a zoo model"), std::string::npos) << read_error(zoo);
  json filed = core::to_json(trace);
  filed["model"]["file"] = {{"path", "/m.pt"}, {"sha256", std::string(64, 'a')}};
  EXPECT_NE(read_error(filed).find("an eager capture has no TorchScript file"), std::string::npos) << read_error(filed);
}

}  // namespace
}  // namespace headroom
