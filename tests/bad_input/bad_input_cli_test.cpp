// The rows of the bad-input table run through the `headroom` binary: exit 2, one line naming the
// problem, no output written or an old one kept.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/json_reader.h"
#include "core/sha256.h"
#include "support/build_paths.h"
#include "support/run_headroom.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kTrace = std::string(HEADROOM_TRACES_DIR) + "/cpu-mlp.json";

using testing::CommandResult;

CommandResult run(const std::string& args) { return testing::run_headroom(args, "headroom_bad_input.stderr", 20); }

class BadInputCli : public ::testing::Test {
 protected:
  void SetUp() override {
    // Per process: ctest -j runs this binary's tests side by side.
    dir_ = fs::temp_directory_path() / ("headroom_bad_input." + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(kTrace, dir_ / "t.json");
    const CommandResult r = run("plan " + path("t.json") + " --budget 300MiB --batch 64 -o " + path("p.json"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    plan_ = core::parse_json(core::read_file(dir_ / "p.json"), "p.json");
    trace_ = core::parse_json(core::read_file(dir_ / "t.json"), "t.json");
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const json& document) const {
    core::write_file_atomically(dir_ / name, document.dump());
    return path(name);
  }
  // Exit 2, one line holding `needle`, and the output (made beforehand with known content) unchanged.
  void expect_refused(const std::string& args, const std::string& needle) {
    const std::string out = path("out.json");
    core::write_file_atomically(out, "untouched");
    const CommandResult r = run(args + " -o " + out);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\nwanted: " << needle << "\ngot: " << r.err;
    EXPECT_EQ(core::read_file(out), "untouched") << args;
    ++refused_;
  }
  void TearDown() override {
    std::printf("%d bad inputs refused\n", refused_);
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  fs::path dir_;
  json plan_, trace_;
  int refused_ = 0;
};

// What headroom refuses (docs/guide/planning.md, "Refused inputs"), and neighbours of each.
// An unknown flag is what is named, even where a required flag is missing too (CLI11 checks the
// required ones first): "--budget is required" would send the user after the wrong flag.
TEST_F(BadInputCli, AnUnknownFlagIsNamedBeforeAMissingRequiredOne) {
  expect_refused("plan " + path("t.json") + " --wat", "not expected: --wat");
  expect_refused("plan " + path("t.json") + " --budget 1GiB --wat=3", "not expected: --wat");
  expect_refused("plan " + path("t.json") + " --batch 8", "--budget is required");
}

TEST_F(BadInputCli, PlanFilesThatWouldSwitchTheBudgetOffOrDisagreeWithTheirTrace) {
  json p = plan_;
  p["budget_bytes"] = 0;
  expect_refused("execute " + write("b0.json", p) + " --steps 1", "$.budget_bytes: expected an integer from 1");
  expect_refused("simulate " + path("b0.json"), "$.budget_bytes");
  for (const json& blocks : {json::array({0, 0}), json::array({std::int64_t{1} << 32})}) {
    p = plan_;
    p["checkpointed_blocks"] = blocks;
    const std::string f = write("blocks.json", p);
    expect_refused("simulate " + f, "$.checkpointed_blocks[");
    expect_refused("execute " + f + " --steps 1", "$.checkpointed_blocks[");
  }
  p = plan_;
  p["checkpointed_blocks"] = json::array({7});
  expect_refused("simulate " + write("noblock.json", p), "the trace has no block 7");
  // Inf-CL's tiles on a model without a contrastive loss, and tiles past any batch.
  p = plan_;
  p["loss_tiles"] = {{"rows", 4}, {"cols", 4}};
  expect_refused("simulate " + write("tiles.json", p), "$.loss_tiles: the trace's model has no contrastive loss");
  expect_refused("execute " + path("tiles.json") + " --steps 1", "contrastive loss");
  p["loss_tiles"] = {{"rows", 0}, {"cols", 4}};
  expect_refused("simulate " + write("tiles0.json", p), "$.loss_tiles.rows: expected an integer from 1");
  p = plan_;
  p["trace"]["model"] = "gpt";
  expect_refused("simulate " + write("model.json", p), "$.trace.model: the plan is for gpt, its trace profiled mlp");
  expect_refused("execute " + path("model.json") + " --steps 1", "$.trace.model");
  p = plan_;
  p["layers"] = json::array();
  expect_refused("simulate " + write("nolayers.json", p), "$.layers: the plan has 0 layers, its trace 10");
  expect_refused("execute " + path("nolayers.json") + " --steps 1", "$.layers: the plan has 0 layers");
  p = plan_;
  p["layers"][2]["name"] = "elsewhere";
  expect_refused("execute " + write("renamed.json", p) + " --steps 1", "$.layers[2].name: 'elsewhere'");
  p = plan_;
  p["loss_weights"][0] = 0.5;
  expect_refused("execute " + write("weights.json", p) + " --steps 1", "$.loss_weights[0]: expected b_i / B");
  p = plan_;
  p["world_size"] = 2;
  expect_refused("simulate " + write("world.json", p), "$.data_parallel: missing");
  expect_refused("execute " + path("world.json") + " --steps 1", "$.data_parallel: missing");
}

// Data parallel's flags and fields.
TEST_F(BadInputCli, DataParallelFlagsAndFields) {
  const std::string trace = path("t.json");
  const std::string plan = " --budget 300MiB --batch 64";
  for (const std::string devices : {"0", "-1", "4097", "x"}) {
    expect_refused("plan " + trace + plan + " --devices " + devices + " --link 1GB/s,1us", "--devices");
  }
  expect_refused("plan " + trace + " --budget 300MiB --batch 3 --devices 4 --link 1GB/s,1us",
                 "--devices: 4 workers need a global batch of at least 4, got 3");
  expect_refused("plan " + trace + plan + " --devices 2", "the trace has no measured link (profile with --measure-link)");
  for (const std::string link : {"1GB/s", "fast,1us", "1Gb/s,1us", "1GB/s,1", "0GB/s,1us", "1GB/s,-1us"}) {
    expect_refused("plan " + trace + plan + " --devices 2 --link " + link, "--link: invalid link '");
  }
  for (const std::string cap : {"0", "-5", "lots"}) {
    expect_refused("plan " + trace + plan + " --devices 2 --link 1GB/s,1us --bucket-cap " + cap, "--bucket-cap");
  }
  // ZeRO's stage: only with workers, only a known one, only one the trace and strategies can run.
  expect_refused("plan " + trace + plan + " --shard 1", "--shard: sharding splits the training state over data-parallel workers");
  expect_refused("plan " + trace + plan + " --shard auto", "--shard: sharding splits the training state");
  for (const std::string stage : {"7", "-1", "one", "1.5"}) {
    expect_refused("plan " + trace + plan + " --devices 2 --link 1GB/s,1us --shard " + stage, "--shard: expected 0, 1, 2, 3 or auto, got");
  }
  // A trace from before sharding does not record its largest parameter tensor, which sizes the
  // buffers stages 2 and 3 reduce from.
  for (const std::string stage : {"2", "3"}) {
    expect_refused("plan " + trace + plan + " --devices 2 --link 1GB/s,1us --shard " + stage,
                   "--shard: stage " + stage + " needs the trace's largest parameter tensor");
  }
  expect_refused("plan " + trace + plan + " --devices 2 --link 1GB/s,1us --shard 3 --strategies mbp,l2l",
                 "--shard: stage 3 cannot combine with l2l");
  expect_refused("plan " + trace + plan + " --devices 2 --link 1GB/s,1us --shard 1 --strategies mbp,l2l",
                 "--shard: stage 1 cannot combine with l2l");
  // What stage 3 gathers at a time: only with workers, only at stage 3, a unit it knows.
  expect_refused("plan " + trace + plan + " --gather block", "--gather: only stage 3 gathers parameters, over data-parallel workers");
  expect_refused("plan " + trace + plan + " --devices 2 --link 1GB/s,1us --shard 1 --gather layer",
                 "--gather: only stage 3 gathers parameters, and --shard 1 keeps them whole");
  for (const std::string unit : {"blocks", "Layer", "2", ""}) {
    expect_refused("plan " + trace + plan + " --devices 2 --link 1GB/s,1us --gather '" + unit + "'", "--gather");
  }
  expect_refused("plan " + trace + plan + " --devices 2 --link 1GB/s,1us --gather row",
                 "--gather: expected block, layer or auto, got 'row'");
  // Named with the stage left to the search, where stage 3 cannot run: said, not dropped.
  expect_refused("plan " + trace + plan + " --devices 2 --link 1GB/s,1us --gather block",
                 "--gather: stage 3 needs the trace's largest parameter tensor");
  // A data-parallel plan, and what execute refuses about it.
  const std::string dp = path("dp.json");
  ASSERT_EQ(run("plan " + trace + plan + " --devices 2 --link 1GB/s,1us -o " + dp).exit_code, 0);
  expect_refused("execute " + dp + " --steps 1", "the plan is for 2 data-parallel workers: run it with --devices 2");
  expect_refused("execute " + dp + " --steps 1 --devices 3", "--devices: the plan is for 2 worker(s), got 3");
  for (const std::string devices : {"0", "65"}) {
    expect_refused("execute " + dp + " --steps 1 --devices " + devices, "--devices: expected from 1 to 64 local workers");
  }
  expect_refused("execute " + dp + " --steps 1 --devices 2 --rank 0", "--devices: give either --devices or --rank");
  expect_refused("execute " + dp + " --steps 1 --rank 0", "--rank: a worker launched by hand needs --rank, --world-size and --store");
  expect_refused("execute " + dp + " --steps 1 --rank 2 --world-size 2 --store file:/tmp/x", "--rank: expected from 0 to 1, got 2");
  expect_refused("execute " + dp + " --steps 1 --rank 0 --world-size 3 --store file:/tmp/x", "--world-size: the plan is for 2");
  expect_refused("execute " + dp + " --steps 1 --rank 0 --world-size 5000 --store file:/tmp/x", "--world-size: expected from 1 to 4096");
  for (const std::string store : {"file:", "tcp:host", "tcp:host:0", "tcp:host:70000", "tcp::12", "http://x", "tcp:h:1x"}) {
    expect_refused("execute " + dp + " --steps 1 --rank 0 --world-size 2 --store " + store, "--store: ");
  }
  json p = core::parse_json(core::read_file(dp), dp);
  p["data_parallel"]["micro_batches_per_worker"] = json::array({1});
  expect_refused("simulate " + write("counts.json", p), "$.data_parallel.micro_batches_per_worker: expected one count per worker (2)");
  p["data_parallel"]["micro_batches_per_worker"] = json::array({1, 0});
  expect_refused("simulate " + write("zero.json", p), "$.data_parallel.micro_batches_per_worker[1]");
  p = core::parse_json(core::read_file(dp), dp);
  p["data_parallel"]["link"]["bytes_per_second"] = 0;
  expect_refused("simulate " + write("link.json", p), "$.data_parallel.link.bytes_per_second: expected from 1 to 1e14");
  p = core::parse_json(core::read_file(dp), dp);
  p["data_parallel"]["link"]["beside_compute"] = 5;
  expect_refused("simulate " + write("beside.json", p), "$.data_parallel.link.beside_compute: expected a share from 0 to 2");
  p = core::parse_json(core::read_file(dp), dp);
  p["data_parallel"]["shard_stage"] = 3;
  p["data_parallel"]["gather"] = "row";
  expect_refused("simulate " + write("gather.json", p), "$.data_parallel.gather: expected block or layer, got 'row'");
  p["data_parallel"]["shard_stage"] = 2;
  p["data_parallel"]["gather"] = "block";
  expect_refused("simulate " + write("gather-2.json", p), "$.data_parallel.gather: only a stage-3 plan gathers parameters");
  p = plan_;
  p["data_parallel"] = p["explanation"];
  expect_refused("simulate " + write("one.json", p), "$.data_parallel: given for one worker");
}

// L2L's strategy, plan field and execution options.
TEST_F(BadInputCli, L2LPlansThatCannotRun) {
  json p = plan_;
  p["l2l"] = {{"boundaries", "gpu"}};
  expect_refused("simulate " + write("l2l-where.json", p), "$.l2l.boundaries: expected device or host, got 'gpu'");
  expect_refused("execute " + path("l2l-where.json") + " --steps 1", "$.l2l.boundaries");
  p["l2l"] = "device";
  expect_refused("simulate " + write("l2l-type.json", p), "$.l2l");
  p = plan_;
  p["l2l"] = {{"boundaries", "device"}};
  p["checkpointed_blocks"] = json::array({1});
  expect_refused("simulate " + write("l2l-ckpt.json", p), "$.l2l: L2L recomputes every block already");
  expect_refused("execute " + path("l2l-ckpt.json") + " --steps 1", "$.l2l: L2L recomputes every block already");
  p = plan_;
  p["l2l"] = {{"boundaries", "device"}};
  p["checkpointed_blocks"] = json::array();
  for (auto& layer : p["layers"]) {
    layer["checkpoint"] = false;
    layer["variant"] = "standard";
  }
  expect_refused("execute " + write("l2l-ref.json", p) + " --steps 1 --full-batch-reference",
                 "full-batch-reference: not implemented for an L2L plan");
  expect_refused("execute " + path("l2l-ref.json") + " --steps 1 --host-limit", "host-limit: an L2L plan keeps");
  // From a chosen block on: a block the model has, as a non-negative whole number.
  p["l2l"]["from_block"] = 7;
  expect_refused("simulate " + write("l2l-from.json", p), "$.l2l.from_block: mlp has no block 7 (its blocks: 0, 1, 2, 3)");
  expect_refused("execute " + path("l2l-from.json") + " --steps 1", "$.l2l.from_block: mlp has no block 7");
  p["l2l"]["from_block"] = -1;
  expect_refused("simulate " + write("l2l-from-neg.json", p), "$.l2l.from_block");
  p["l2l"]["from_block"] = "block1";
  expect_refused("simulate " + write("l2l-from-text.json", p), "$.l2l.from_block");
  p["l2l"]["from_block"] = 1.5;
  expect_refused("simulate " + write("l2l-from-frac.json", p), "$.l2l.from_block");
  // The cnn's BatchNorm: refused as a strategy by name and as a hand-edited plan field.
  fs::copy_file(std::string(HEADROOM_TRACES_DIR) + "/cpu-cnn.json", dir_ / "cnn.json");
  expect_refused("plan " + path("cnn.json") + " --budget 300MiB --batch 64 --strategies mbp,l2l",
                 "--strategies l2l: L2L cannot run cnn: its BatchNorm layer stem.bn");
  ASSERT_EQ(run("plan " + path("cnn.json") + " --budget 300MiB --batch 64 --strategies mbp -o " + path("cnn-plan.json")).exit_code, 0);
  p = core::parse_json(core::read_file(dir_ / "cnn-plan.json"), "cnn-plan.json");
  p["l2l"] = {{"boundaries", "device"}};
  const std::string with_l2l = write("cnn-l2l.json", p);
  expect_refused("simulate " + with_l2l, "$.l2l: L2L cannot run cnn: its BatchNorm layer stem.bn");
  expect_refused("execute " + with_l2l + " --steps 1", "$.l2l: L2L cannot run cnn");
}

TEST_F(BadInputCli, TracesWithClashingOrOutOfRangeFields) {
  json t = trace_;
  t["layers"][1]["name"] = t["layers"][0]["name"];
  expect_refused("plan " + write("dup.json", t) + " --budget 300MiB --batch 64",
                 "$.layers[1].name: '" + t["layers"][0]["name"].get<std::string>() + "' is already the name of layer 0");
  t = trace_;
  t["layers"][1]["block"] = 4294967295;
  expect_refused("plan " + write("block.json", t) + " --budget 300MiB --batch 64", "$.layers[1].block");
  t = trace_;
  t["layers"][1]["id"] = std::int64_t{4294967296};
  expect_refused("plan " + write("id.json", t) + " --budget 300MiB --batch 64", "$.layers[1].id: expected 1");
  t = trace_;
  t["model"]["config"]["depth"] = "-2";
  // The plan reads nothing of the settings; building the model for execute names the key.
  const std::string trace_file = write("t.json", t);
  json p = plan_;
  p["trace"]["sha256"] = core::sha256_hex(core::read_file(trace_file));
  expect_refused("execute " + write("config.json", p) + " --steps 1", "key 'depth'");
}

// Names both sides must agree on (core/strategies.h, core/known_names.h): a technique no step runs, an optimizer
// nothing builds, a layer kind the zoo never makes are refused where the file is read, with the
// names known.
TEST_F(BadInputCli, UnknownNamesInPlansAndTraces) {
  json p = plan_;
  p["strategies"] = json::array({"offload"});
  const std::string strategy = write("strategy.json", p);
  expect_refused("simulate " + strategy, strategy + ": $.strategies[0]: unknown strategy 'offload' (known: mbp, checkpoint, "
                                         "tempo, infcl, l2l)");
  expect_refused("execute " + strategy + " --steps 1", "$.strategies[0]: unknown strategy 'offload'");
  p = plan_;
  p["optimizer"] = "rmsprop";
  expect_refused("simulate " + write("optimizer.json", p), "$.optimizer: unknown optimizer 'rmsprop' (known: sgd, "
                 "sgd(momentum=M), adam, adam(amsgrad), adamw, adamw(amsgrad))");
  json t = trace_;
  t["optimizer"]["name"] = "rmsprop";
  const std::string optimizer = write("optimizer-trace.json", t);
  expect_refused("plan " + optimizer + " --budget 300MiB --batch 64",
                 optimizer + ": $.optimizer.name: unknown optimizer 'rmsprop' (known: sgd, "
                 "sgd(momentum=M), adam, adam(amsgrad), adamw, adamw(amsgrad))");
  t = trace_;
  t["layers"][1]["kind"] = "GELU";
  const std::string kind = write("kind.json", t);
  expect_refused("plan " + kind + " --budget 300MiB --batch 64",
                 kind + ": $.layers[1].kind: unknown layer kind 'GELU' for a zoo model (known: add, attention, batchnorm,");
}

TEST_F(BadInputCli, FlagsAndFilesThatAreNotWhatTheySay) {
  const std::string trace = path("t.json");
  expect_refused("plan " + trace + " --budget 300MiB --batch 1099511627776", "--batch: at most 1048576 samples");
  expect_refused("plan " + trace + " --budget 300MiB --batch 9223372036854775807", "--batch");
  for (const std::string budget : {"-1", "''", "1e30", "0"}) {
    expect_refused("plan " + trace + " --budget " + budget + " --batch 64", "--budget");
  }
  const std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_refused("plan " + fifo + " --budget 300MiB --batch 64", fifo + ": not a regular file");
  expect_refused("simulate " + fifo, "not a regular file");
  expect_refused("plan " + path("missing.json") + " --budget 300MiB --batch 64", "missing.json: no such file");
  expect_refused("plan " + dir_.string() + " --budget 300MiB --batch 64", "not a regular file");
  // A file too large to be a trace is refused before it is read (sparse: it takes no disk).
  const fs::path huge = dir_ / "huge.json";
  core::write_file_atomically(huge, "{");
  fs::resize_file(huge, std::uintmax_t{1} << 30);
  expect_refused("plan " + huge.string() + " --budget 300MiB --batch 64", "1024 MiB, more than the 64 MiB headroom reads");

  // Outputs that are not regular files: refused before any work, the path left as it was.
  for (const auto& [output, needle] : std::vector<std::pair<std::string, std::string>>{
           {fifo, "--output: " + fifo + " is not a regular file"},
           {dir_.string(), "is not a regular file"},
           {"''", "--output: expected a file path, got an empty one"},
           {path("no/such/dir/p.json"), "does not exist"}}) {
    const CommandResult r = run("plan " + trace + " --budget 300MiB --batch 64 -o " + output);
    EXPECT_EQ(r.exit_code, 2) << output << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    ++refused_;
  }
  struct stat info {};
  ASSERT_EQ(::stat(fifo.c_str(), &info), 0);
  EXPECT_TRUE(S_ISFIFO(info.st_mode));
  const CommandResult chrome = run("simulate " + path("p.json") + " --chrome " + fifo);
  EXPECT_EQ(chrome.exit_code, 2);
  EXPECT_NE(chrome.err.find("--chrome: "), std::string::npos) << chrome.err;
  ++refused_;
}

// What a user can type that would make the program allocate or spawn without end, and outputs
// that would clobber an input or each other (docs/guide/planning.md, "Refused inputs"): refused
// before any work.
// Your own model's flags; what a module itself gets wrong is in torchscript_test.cpp.
TEST_F(BadInputCli, TorchScriptFlagsAndFilesThatAreNotAModule) {
  core::write_file_atomically(dir_ / "junk.pt", "not a model");
  const std::string junk = path("junk.pt");
  expect_refused("profile --torchscript " + path("missing.pt") + " --input 3:float32", "missing.pt: no such file");
  expect_refused("profile --torchscript " + junk + " --input 3:float32", "junk.pt is not a TorchScript module");
  expect_refused("profile --torchscript " + dir_.string() + " --input 3:float32", "not a regular file");
  expect_refused("profile --torchscript " + junk, "--input: give one sample's shape and dtype");
  expect_refused("profile --model mlp --torchscript " + junk + " --input 3:float32", "either --model");
  expect_refused("profile --batch-sizes 1", "either --model");
  expect_refused("profile --torchscript " + junk + " --input 3:float32 --set depth=2", "--set: size settings are for zoo");
  expect_refused("profile --model mlp --input 3:float32", "--input: applies to --torchscript modules only");
  expect_refused("profile --model mlp --layers a,b", "--layers: applies to --torchscript modules only");
  expect_refused("profile --torchscript " + junk + " --input 3:float16", "--input: dtype 'float16' is not supported");
  expect_refused("profile --torchscript " + junk + " --input 3x0:float32", "--input: dimension '0'");
  expect_refused("profile --torchscript " + junk + " --input 16:int64", "--input: integers need their range");
  expect_refused("profile --torchscript " + junk + " --input 16:int64:9-3", "--input: range '9-3'");
  // Repeated for a forward with several inputs, each is checked before the file is read.
  expect_refused("profile --torchscript " + junk + " --input 3:float32 --input 16:int64", "--input: integers need their range");
  expect_refused("profile --torchscript " + junk + " --input 3:float32 --input ''", "--input: '' is not a tensor spec");
  expect_refused("profile --model mlp --input 3:float32 --input 4:float32", "--input: applies to --torchscript modules only");
  // A precision headroom does not run is refused by name before anything is built.
  expect_refused("profile --model mlp --precision fp8", "--precision: 'fp8' is not a precision (known: fp32, bf16-autocast");
  expect_refused("profile --model mlp --precision fp16-autocast", "precision: fp16-autocast runs on CUDA");
  // Several precisions: each is checked before the first is profiled.
  expect_refused("profile --model mlp --precision fp32,fp16-autocast", "precision: fp16-autocast runs on CUDA");
  expect_refused("profile --model mlp --precision fp32,bf16,fp32", "--precision: fp32 is named twice");
  expect_refused("profile --model mlp --precision fp32,", "--precision: '' is not a precision");
  expect_refused("profile --torchscript " + junk + " --input 3:float32 --target 3:bool", "--target: dtype 'bool'");
  expect_refused("profile --torchscript " + junk + " --input 3:float32 --loss hinge", "--loss");
  expect_refused("profile --torchscript " + junk + " --input 3:float32 --loss model --target 3:float32",
                 "--target: with --loss model");
}

// Fine-tuning's flags (docs/guide/finetuning.md): what to freeze and the optimizer's settings.
TEST_F(BadInputCli, FreezePatternsAndOptimizerSettings) {
  expect_refused("profile --model mlp --freeze nothing.here", "--freeze: 'nothing.here' names no parameter of mlp");
  expect_refused("profile --model mlp --freeze '*'", "--freeze: '*' leaves no parameter of mlp to train");
  expect_refused("profile --model mlp --freeze 'fc0,,fc1'", "--freeze: expected comma-separated patterns");
  expect_refused("profile --model mlp --freeze '!'", "--freeze: expected comma-separated patterns");
  expect_refused("profile --model mlp --optimizer lion", "--optimizer: unknown optimizer 'lion'");
  expect_refused("profile --model mlp --optimizer 'sgd(momentum=2)'", "--optimizer: unknown optimizer 'sgd(momentum=2)'");
  expect_refused("profile --model mlp --optimizer sgd --momentum 1", "--momentum: momentum must be at least 0 and below 1");
  expect_refused("profile --model mlp --optimizer adam --momentum 0", "--momentum: only SGD has a momentum setting");
  expect_refused("profile --model mlp --optimizer sgd --amsgrad", "--amsgrad: only adam and adamw have amsgrad");
  expect_refused("plan " + path("t.json") + " --budget 1GiB --batch 8 --momentum 0",
                 "--momentum: give the optimizer it sets with --optimizer (the trace's is adam)");
  expect_refused("plan " + path("t.json") + " --budget 1GiB --batch 8 --optimizer rmsprop",
                 "--optimizer: unknown optimizer 'rmsprop'");
}

TEST_F(BadInputCli, TypedSizesAndOutputsThatClobberAreRefusedAtOnce) {
  const std::string profile = "profile --model mlp";
  expect_refused(profile + " --threads 100000 --batch-sizes 1", "--threads: expected 0 (libtorch's default) to 256, got 100000");
  expect_refused(profile + " --batch-sizes 1,,2", "--batch-sizes: item 2 of '1,,2' is not a batch size");
  expect_refused(profile + " --batch-sizes ''", "--batch-sizes: item 1");
  expect_refused(profile + " --batch-sizes 2000000", "--batch-sizes: at most 1048576 samples, got 2000000");
  expect_refused(profile + " --set hidden=9223372036854775807", "key 'hidden' expects at most 1048576");
  expect_refused(profile + " --set depth=100000000", "key 'depth' expects at most 1048576");
  // Each setting in range, together past any host: the model's size is estimated before it is built.
  expect_refused(profile + " --set depth=1048576 --set hidden=1048576",
                 "model mlp: the settings depth=1048576, hidden=1048576 make about 1.15e+18 parameters");
  expect_refused("profile --model cnn --set stages=64", "of memory this host has available; choose smaller settings");
  expect_refused("profile --model gpt --set seq=1048576", "model gpt: the settings seq=1048576 make about");
  {
    // A batch no host holds (bert mini's attention scores alone: 275 GB at 2^20 samples) is refused
    // from two small micro-batches' memory, before it runs: exit 3 naming what fits.
    const std::string out = path("out.json");
    core::write_file_atomically(out, "untouched");
    const CommandResult big = run("profile --model bert --set preset=mini --batch-sizes 4,1048576 -o " + out);
    EXPECT_EQ(big.exit_code, 3) << big.err;
    EXPECT_EQ(std::count(big.err.begin(), big.err.end(), '\n'), 1) << big.err;
    EXPECT_NE(big.err.find("profiling batch 1048576 needs about"), std::string::npos) << big.err;
    EXPECT_NE(big.err.find("the largest batch that fits is about "), std::string::npos) << big.err;
    EXPECT_EQ(core::read_file(out), "untouched");
    ++refused_;
  }

  const std::string trace_before = core::read_file(dir_ / "t.json");
  CommandResult r = run("plan " + path("t.json") + " --budget 1GiB --batch 32 -o " + path("t.json"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--output: " + path("t.json") + " is this command's input"), std::string::npos) << r.err;
  EXPECT_EQ(core::read_file(dir_ / "t.json"), trace_before);
  core::write_file_atomically(dir_ / "s.json", "untouched");
  r = run("simulate " + path("p.json") + " -o " + path("s.json") + " --chrome " + path("nodir/x.json"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--chrome: "), std::string::npos) << r.err;
  EXPECT_EQ(core::read_file(dir_ / "s.json"), "untouched");
  r = run("simulate " + path("p.json") + " -o " + path("s.json") + " --chrome " + path("s.json"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("is also another output"), std::string::npos) << r.err;
  // Refused before the profile runs, not after it.
  r = run("profile --model mlp --batch-sizes 1,2 -o " + path("nodir/t.json"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--output: "), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  refused_ += 4;
}

}  // namespace
}  // namespace headroom
