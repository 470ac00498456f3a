// Runs the real `mnemo` binary as users do: exit codes and messages.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_split.h"
#include "tests/unit/services/certificates.h"
#include "tests/unit/services/cli_test_util.h"
#include "trainer/runtime/depbloom_sizes.h"

namespace {
namespace fs = std::filesystem;

using mnemo::cli_testing::CliTest;
using mnemo::cli_testing::Mnemo;
using mnemo::cli_testing::ReadFile;
using mnemo::cli_testing::Result;
using mnemo::cli_testing::SharedData;
using mnemo::cli_testing::Shell;

TEST_F(CliTest, HelpAndUsage) {
  Result r = Mnemo("train --help");
  EXPECT_EQ(r.code, 0);
  for (const char* flag :
       {"--data", "--format", "--model", "--epochs", "--batch-size", "--lr",
        "--memory-dim", "--time-dim", "--embedding-dim", "--neighbors",
        "--heads", "--dropout", "--patience", "--seed", "--threads", "--out",
        "--resume", "--config", "--precision"}) {
    EXPECT_THAT(r.output, testing::HasSubstr(flag));
  }
  EXPECT_EQ(Mnemo("frobnicate").code, 2);
  r = Mnemo("train --epochs many");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, testing::HasSubstr("--epochs"));
}

// The binary starts without an NVIDIA driver (every CI machine) and says
// what it links and what it found.
TEST_F(CliTest, VersionNamesLibTorchCudaNcclAndTheDriver) {
  Result r = Mnemo("version");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("LibTorch 2.11.0 (CUDA 13.0, NCCL "
                                           "2.28.9)"));
  EXPECT_THAT(r.output, testing::HasSubstr("NVIDIA driver: "));
  if (std::system("ldconfig -p | grep -q 'libcuda.so.1 '") != 0) {
    EXPECT_THAT(r.output,
                testing::HasSubstr("NVIDIA driver: none "
                                   "(libcuda.so.1 not found); GPUs: 0"));
  }
}

// The service roles run from `mnemo`, which links no LibTorch; the trainer's
// commands run in mnemo-trainer beside it, and a launcher there starts its
// shards and coordinator from `mnemo` again.
TEST_F(CliTest, ServiceRolesLoadNoLibTorch) {
  const char* bin_env = std::getenv("MNEMO_BIN");
  ASSERT_NE(bin_env, nullptr) << "MNEMO_BIN names build/services/mnemo";
  const fs::path bin = fs::canonical(bin_env);
  const fs::path trainer = bin.parent_path() / "mnemo-trainer";
  auto needed = [](const fs::path& exe) {
    return Shell("readelf -d " + exe.string() + " | grep NEEDED").output;
  };
  EXPECT_THAT(needed(bin), testing::HasSubstr("librocksdb"));
  EXPECT_THAT(needed(bin), testing::Not(testing::HasSubstr("libtorch")));
  EXPECT_THAT(needed(bin), testing::Not(testing::HasSubstr("libc10")));
  EXPECT_THAT(needed(trainer), testing::HasSubstr("libtorch"));

  // A memory-store shard started from `mnemo` has mapped every library it
  // links (librocksdb among them) and no LibTorch.
  Result r = Shell(bin.string() +
                   " memstore --listen 127.0.0.1:0 --dim 4 --data-dir " +
                   (dir_ / "ms").string() +
                   " >/dev/null & pid=$!; for i in $(seq 200); do grep -q "
                   "librocksdb /proc/$pid/maps && break; sleep 0.05; done; "
                   "echo \"torch maps: $(grep -c libtorch /proc/$pid/maps)\"; "
                   "kill $pid; wait $pid");
  EXPECT_THAT(r.output, testing::HasSubstr("torch maps: 0\n")) << r.output;

  // `mnemo train` hands itself to the trainer executable, naming itself as
  // the one to start service roles from...
  const std::string dump = Write(
      "dump.sh", "#!/bin/sh\necho \"service=$MNEMO_SERVICE_EXE args=$*\"\n");
  fs::permissions(dump, fs::perms::owner_all);
  r = Mnemo("train --data x", "MNEMO_TRAINER_EXE=" + dump);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("service=" + bin.string() +
                                           " args=train --data x"));
  // ...and its launcher starts every shard and the coordinator from there.
  const std::string log = (dir_ / "service.log").string();
  const std::string wrap =
      Write("service.sh", "#!/bin/sh\necho \"$1\" >>" + log + "\nexec " +
                              bin.string() + " \"$@\"\n");
  fs::permissions(wrap, fs::perms::owner_all);
  r = Mnemo(SmallTrain() + " --workers 2", "MNEMO_SERVICE_EXE=" + wrap);
  EXPECT_EQ(r.code, 0) << r.output;
  std::vector<std::string> roles =
      absl::StrSplit(ReadFile(log), '\n', absl::SkipEmpty());
  std::sort(roles.begin(), roles.end());
  EXPECT_THAT(roles,
              testing::ElementsAre("coordinator", "memstore", "memstore"));

  // A service-only installation (no mnemo-trainer beside it): version says
  // so, train names what is missing, the service roles run.
  const fs::path alone = dir_ / "bin" / "mnemo";
  fs::create_directories(alone.parent_path());
  fs::copy_file(bin, alone);
  r = Shell(alone.string() + " version");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("service roles only"));
  r = Shell(alone.string() + " train --data collegemsg");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("mnemo-trainer"));
  EXPECT_THAT(r.output, testing::HasSubstr("MNEMO_TRAINER_EXE"));
  r = Shell(alone.string() + " data --data-dir " + SharedData() +
            " collegemsg");
  EXPECT_EQ(r.code, 0) << r.output;
}

// Checkpoints written by the LibTorch 1.13 build load and resume: mnemo's
// own layout (parameters and Adam state by parameter index) in LibTorch's
// archive format, which 2.11 reads. The 1.13 build itself continued this
// file to loss 1.4105 and val AP 0.4650 (tests/data/libtorch113_checkpoint).
TEST_F(CliTest, LibTorch113CheckpointResumes) {
  const fs::path fixture =
      fs::path(MNEMO_SOURCE_DIR) / "tests/data/libtorch113_checkpoint";
  fs::copy(fixture, dir_ / "run", fs::copy_options::recursive);
  const char* shared = std::getenv("MNEMO_SHARED_DATA");
  ASSERT_NE(shared, nullptr);
  Result r = Mnemo("train --data collegemsg --data-dir " + std::string(shared) +
                   " --max-events 3000 --epochs 2 --memory-dim 8 --time-dim 8 "
                   "--embedding-dim 8 --heads 2 --progress lines --resume " +
                   (dir_ / "run").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("checkpoints/epoch-0001.pt (epoch 1 "
                                           "done)"));
  // A file from before checksums loads, and says it was not verified.
  EXPECT_THAT(r.output, testing::HasSubstr("has no checksum"));
  double loss = 0, val_ap = 0;
  const size_t at = r.output.find("epoch 2/2");
  ASSERT_NE(at, std::string::npos) << r.output;
  ASSERT_EQ(std::sscanf(r.output.c_str() + at, "epoch 2/2 loss %lf val AP %lf",
                        &loss, &val_ap),
            2)
      << r.output.substr(at, 80);
  EXPECT_NEAR(loss, 1.4105, 0.002);
  EXPECT_NEAR(val_ap, 0.4650, 0.005);
}

TEST_F(CliTest, EachBadValueIsNamedAlone) {
  // One flag per message, before any data is read.
  for (const auto& [args, flag] :
       std::vector<std::pair<std::string, std::string>>{
           {"--threads -1", "--threads must be in [0, 1024]"},
           {"--threads 100000", "--threads must be in [0, 1024]"},
           {"--eval-batch-size -5",
            "--eval-batch-size must be in [0, 1000000]"},
           {"--max-events -1", "--max-events must be >= 0"},
           {"--patience -2", "--patience must be in [0, 100000]"},
           {"--heads 0", "--heads must be in [1, 64]"},
           {"--lr 0", "--lr must be > 0"},
           {"--dropout 1", "--dropout must be in [0, 1)"},
           {"--memory-cache-bytes -1", "--memory-cache-bytes must be >= 0"},
           {"--memory-prefetch -1", "--memory-prefetch must be 0 to 64"},
           {"--memory-prefetch 65", "--memory-prefetch must be 0 to 64"},
           {"--memory-cache-bytes 100000",
            "--memory-cache-bytes bounds what a cluster worker holds"},
           {"--workers 2 --memstore-hot-bytes -1",
            "--memstore-hot-bytes must be >= 0"},
           {"--bucket-mb -0.5", "--bucket-mb must be in [0, 1024]"},
           {"--bucket-mb 2000", "--bucket-mb must be in [0, 1024]"},
           {"--tau-load -0.5", "--tau-load must be >= 0"},
           {"--tau-grad 0", "--tau-grad must be > 0"}}) {
    Result r = Mnemo("train --data collegemsg " + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_THAT(r.output, testing::HasSubstr(flag)) << args;
    EXPECT_THAT(r.output, testing::Not(testing::HasSubstr("--embedding-dim")))
        << args;
  }
  // What a model's shapes need, also before a cluster starts (the data set
  // does not exist: nothing was read).
  for (const auto& [args, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"--heads 3", "(200) must be divisible by --heads (3)"},
           {"--heads 3 --workers 2", "must be divisible by --heads (3)"},
           {"--model apan --mailbox 1", "--mailbox must be >= 2 for apan"},
           {"--model tgat --layers 3", "--layers must be 1 or 2 for tgat"},
           {"--model tgat --heads 3",
            "--embedding-dim (100) must be "
            "divisible by --heads (3) for tgat"}}) {
    Result r = Mnemo("train --data no-such-data " + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_THAT(r.output, testing::HasSubstr(message)) << args;
    EXPECT_THAT(r.output, testing::Not(testing::HasSubstr("memstore"))) << args;
  }
}

// Sizes no real run comes near are usage errors naming the flag and its
// range, before any data is read (the data set does not exist): not
// gigabytes allocated (an evaluation batch of 2e9 events took 8.3 GB) or
// LibTorch failing to allocate them.
TEST_F(CliTest, SizesBeyondAnyRealRunAreUsageErrors) {
  for (const auto& [args, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"--eval-batch-size 2000000000",
            "--eval-batch-size must be in [0, 1000000] (0: the default), got "
            "2000000000"},
           {"--batch-size 2000000000", "--batch-size must be in [1, 1000000]"},
           {"--model dysat --snapshots 1000000",
            "--snapshots must be in [1, 1024], got 1000000"},
           {"--memory-dim 1000000000", "--memory-dim must be in [1, 8192]"},
           {"--time-dim 100000", "--time-dim must be in [1, 8192]"},
           {"--embedding-dim 100000", "--embedding-dim must be in [1, 8192]"},
           {"--heads 1000", "--heads must be in [1, 64]"},
           {"--neighbors 100000", "--neighbors must be in [1, 1024]"},
           {"--model apan --mailbox 100000", "--mailbox must be in [1, 1024]"},
           {"--layers 100", "--layers must be in [1, 16]"},
           {"--epochs 100000000", "--epochs must be in [1, 100000]"},
           {"--patience 1000000", "--patience must be in [0, 100000]"},
           {"--tgb-negatives 100000000",
            "--tgb-negatives must be in [-1, 1000000]"},
           {"--refine-chunks 100000", "--refine-chunks must be in [0, 1024]"},
           {"--profile-batches 0", "--profile-batches must be in [1, 100000]"},
           {"--sync-every 10000000", "--sync-every must be in [1, 1000000]"},
           {"--urgent-batches 10000000",
            "--urgent-batches must be in [0, 1000000]"},
           {"--model dysat --snapshot-span -1",
            "--snapshot-span must be > 0 and finite"},
           {"--workers 2 --heads 1000", "--heads must be in [1, 64]"}}) {
    Result r = Mnemo("train --data no-such-data " + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_THAT(r.output, testing::HasSubstr(message)) << args;
    EXPECT_THAT(r.output, testing::Not(testing::HasSubstr("memstore"))) << args;
  }
  // A trainer's own: its timeouts (in milliseconds they would overflow),
  // its rank and world size.
  for (const auto& [args, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"--timeout 1e16", "--timeout must be in (0, 86400] seconds"},
           {"--connect-timeout 1e16",
            "--connect-timeout must be in (0, 86400] seconds"},
           {"--world-size 2000000000", "--world-size must be in [1, 65536]"},
           {"--rank 5 --world-size 2", "--rank 5 is outside 0..1"},
           {"--eval-batch-size 2000000000", "--eval-batch-size must be in"}}) {
    Result r = Mnemo(
        "trainer --rank 0 --world-size 2 --coordinator "
        "127.0.0.1:1 --data no-such-data " +
        args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_THAT(r.output, testing::HasSubstr(message)) << args;
  }
}

// The choices among names are parsed as the flags are read: a bad one is
// a usage error naming the flag and the accepted names, from the command
// line or a --config file, before any data is read (the dataset does not
// exist) or any cluster starts.
TEST_F(CliTest, EachBadChoiceIsAUsageError) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--model bogus", "--model must be tgn, jodie"},  // ... got 'bogus'
      {"--protocol x",
       "--protocol must be tgn-reference, mnemo or tgb, got 'x'"},
      {"--precision x", "--precision must be fp32 or bf16, got 'x'"},
      {"--neighbor-strategy x",
       "--neighbor-strategy must be recent or uniform, got 'x'"},
      {"--partitioner x",
       "--partitioner must be metis, greedy or time, got "
       "'x'"},
      {"--push-scope x", "--push-scope must be advanced or owned, got 'x'"},
      {"--sync-scope x", "--sync-scope must be reads or frontier, got 'x'"},
      {"--format x", "--format: unknown format 'x'; known: auto, snap"},
      {"--device gpu", "--device must be cpu, cuda or cuda:N"},
      {"--progress x", "--progress must be auto, bar, lines or none, got 'x'"},
      {"--memory-eviction x",
       "--memory-eviction must be belady or lru, got 'x'"},
      {"--lr-scaling x",
       "--lr-scaling must be auto, none, sqrt or linear, got 'x'"},
      {"--grad-comm fp16", "--grad-comm must be fp32 or bf16, got 'fp16'"}};
  for (const auto& [args, message] : cases) {
    for (const std::string& command :
         {std::string("train"), std::string("train --workers 2"),
          std::string("trainer --rank 0 --world-size 2 --coordinator "
                      "127.0.0.1:1")}) {
      Result r = Mnemo(command + " --data no-such-dataset " + args);
      EXPECT_EQ(r.code, 2) << command << " " << args << ": " << r.output;
      EXPECT_THAT(r.output, testing::HasSubstr(message)) << command << args;
      EXPECT_THAT(r.output, testing::Not(testing::HasSubstr("no-such")))
          << command << " " << args;
    }
    // The same key in a config file: the message names the file.
    const std::string key = args.substr(2, args.find(' ') - 2);
    const std::string config =
        Write("bad.yaml", key + ": " + args.substr(args.find(' ') + 1) + "\n");
    Result r = Mnemo("train --data no-such-dataset --config " + config);
    EXPECT_EQ(r.code, 2) << config << ": " << r.output;
    EXPECT_THAT(r.output, testing::HasSubstr(config + ": " + message)) << key;
  }
  // An empty --neighbor-strategy is the model's, as before: accepted (the
  // run goes on to look for the data).
  Result r = Mnemo("train --data no-such-dataset --neighbor-strategy ''");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("no-such-dataset"));
  // --help shows the defaults by name.
  r = Mnemo("train --help");
  EXPECT_THAT(r.output, testing::HasSubstr("(default: tgn-reference)"));
  EXPECT_THAT(r.output, testing::HasSubstr("(default: metis)"));
}

// --gpus: usage errors before anything starts; --device cuda without a GPU
// says why (exit 1) before any data is read.
TEST_F(CliTest, GpusAndDeviceErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--workers 2 --gpus 0", "names 1 GPUs for --workers 2"},
      {"--workers 2 --gpus 0,0", "GPU 0 is named twice"},
      {"--gpus x", "--gpus must be a list of GPU indices"},
      {"--gpus 1 --device cuda:1", "--gpus and --device cuda:1 both"},
      {"--workers 2 --device cuda:1", "would put every trainer on one GPU"}};
  for (const auto& [args, message] : cases) {
    Result r = Mnemo("train --data no-such-dataset " + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_THAT(r.output, testing::HasSubstr(message)) << args;
  }
  // LOCAL_RANK (the GPU of a trainer's node-local rank) is read with the
  // rest of the trainer's environment.
  Result bad = Mnemo(
      "trainer --rank 0 --world-size 2 --coordinator 127.0.0.1:1 --data "
      "no-such-dataset --device cuda",
      "LOCAL_RANK=first");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_THAT(bad.output,
              testing::HasSubstr("LOCAL_RANK='first' must be an integer"));
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver != nullptr) {
    dlclose(driver);
    GTEST_SKIP() << "an NVIDIA driver is present (gpu_test covers GPUs)";
  }
  for (const std::string args : {"--device cuda", "--gpus 0"}) {
    Result r = Mnemo("train --data no-such-dataset " + args);
    EXPECT_EQ(r.code, 1) << args << ": " << r.output;
    EXPECT_THAT(r.output, testing::HasSubstr("no CUDA GPU: no NVIDIA driver"));
    EXPECT_THAT(r.output, testing::Not(testing::HasSubstr("no-such")));
  }
}

TEST_F(CliTest, ConfigDirectoryAndBadEnvironmentAreRefused) {
  Result r = Mnemo("train --config " + dir_.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("is a directory"));
  r = Mnemo("coordinator --world-size 0 --memstores 127.0.0.1:1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("--world-size must be >= 1"));
  r = Mnemo("coordinator --memstores 127.0.0.1:1", "MASTER_PORT=99999");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("MASTER_PORT='99999'"));
  r = Mnemo("trainer --data collegemsg", "RANK=one WORLD_SIZE=2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("RANK='one' must be an integer"));
}

// A port above 65535 is a usage error (exit 2) naming the flag and the
// value, in every command that takes an address; nothing is started
// (gRPC would listen on the port modulo 65536: 70001 on 4465).
TEST_F(CliTest, PortsAbove65535AreUsageErrors) {
  const std::string data = (dir_ / "ms").string();
  for (const auto& [args, flag] :
       std::vector<std::pair<std::string, std::string>>{
           {"memstore --dim 4 --data-dir " + data + " --listen 127.0.0.1:70001",
            "--listen: port 70001 of '127.0.0.1:70001'"},
           {"memstore --dim 4 --data-dir " + data + " --metrics-listen :65536",
            "--metrics-listen: port 65536"},
           {"coordinator --listen 127.0.0.1:70001 --memstores 127.0.0.1:1",
            "--listen: port 70001"},
           {"coordinator --memstores 127.0.0.1:7000,127.0.0.1:70001",
            "--memstores: port 70001"},
           {"coordinator --memstores 127.0.0.1:1 --metrics-listen :99999",
            "--metrics-listen: port 99999"},
           {"trainer --data collegemsg --rank 0 --world-size 1 "
            "--coordinator 127.0.0.1:70001",
            "--coordinator: port 70001"},
           {"trainer --data collegemsg --rank 0 --world-size 1 "
            "--coordinator 127.0.0.1:1 --metrics-listen :70001",
            "--metrics-listen: port 70001"},
           {"train --data collegemsg --metrics-listen :70001",
            "--metrics-listen: port 70001"},
           {"train --data collegemsg --workers 3 --metrics-listen :65534",
            "trainer 2 would serve on port 65536"},
           {"query --stats --memstore 127.0.0.1:70001",
            "--memstore: port 70001"},
           {"healthcheck 127.0.0.1:70001", "port 70001"}}) {
    Result r = Mnemo(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_THAT(r.output, testing::HasSubstr(flag)) << args;
  }
  EXPECT_FALSE(fs::exists(data)) << "a memstore started";
}

// TLS mistakes at start, as users see them: a key of another certificate
// is named with both files (it was "cannot listen on ..."); an expired
// certificate starts the server with a warning (it started silently).
TEST_F(CliTest, TlsMistakesAreNamedAtStart) {
  mnemo::test_support::Certificates pki(dir_ / "pki");
  ASSERT_TRUE(pki.ok()) << "openssl could not make the certificates";
  ASSERT_TRUE(pki.MakeDated("expired", "20200101000000Z", "20200102000000Z"));
  Result r = Mnemo("memstore --listen 127.0.0.1:0 --dim 4 --data-dir " +
                       (dir_ / "ms").string() + " --tls-cert " +
                       pki("server.pem") + " --tls-key " + pki("client.key"),
                   "timeout -s TERM 20");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("--tls-key " + pki("client.key") +
                                           " does not match the certificate "
                                           "in --tls-cert " +
                                           pki("server.pem")));
  EXPECT_THAT(r.output, testing::Not(testing::HasSubstr("cannot listen")));
  r = Mnemo(
      "coordinator --listen 127.0.0.1:0 --memstores 127.0.0.1:1 "
      "--tls-cert " +
          pki("server.pem") + " --tls-key " + pki("client.key"),
      "timeout -s TERM 20");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("does not match the certificate"));
  // Started, warned, stopped by the timeout's SIGTERM (the binary needs a
  // moment to load its libraries).
  r = Mnemo("memstore --listen 127.0.0.1:0 --dim 4 --data-dir " +
                (dir_ / "ms2").string() + " --tls-cert " + pki("expired.pem") +
                " --tls-key " + pki("expired.key"),
            "timeout -s TERM 5");
  EXPECT_THAT(r.output, testing::HasSubstr("listening on"));
  EXPECT_THAT(r.output,
              testing::HasSubstr("mnemo memstore: warning: --tls-cert " +
                                 pki("expired.pem") +
                                 " expired on Jan  2 00:00:00 2020 GMT"));
}

TEST_F(CliTest, OneTimestampForAllAndBinaryBytesAreExplained) {
  std::string text;
  for (int i = 0; i < 1000; ++i) {
    text +=
        std::to_string(i % 50) + " " + std::to_string(50 + i % 37) + " 12345\n";
  }
  Result r = Mnemo("train --format snap --epochs 1 --data " +
                   Write("same_time.txt", text));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output,
              testing::HasSubstr("all 1000 events have the same timestamp"));
  r = Mnemo("data --format snap " +
            Write("binary.txt", "1 2 3\n\x01\x02\xff\xfe garbage\n"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("binary.txt:2"));
  EXPECT_THAT(r.output, testing::HasSubstr("\\x01\\x02\\xff\\xfe garbage"));
  EXPECT_EQ(r.output.find('\xff'), std::string::npos);
}

TEST_F(CliTest, AMemstoreDirectoryKeepsItsShard) {
  const std::string data = (dir_ / "ms").string();
  // Shard 0 of 2 starts (and is stopped by timeout; the binary needs a
  // moment to load its libraries).
  Mnemo(
      "memstore --listen 127.0.0.1:0 --dim 4 --shard-id 0 --num-shards 2 "
      "--data-dir " +
          data,
      "timeout -s TERM 5");
  ASSERT_TRUE(fs::exists(dir_ / "ms" / "shard"));
  Result r = Mnemo(
      "memstore --listen 127.0.0.1:0 --dim 4 --shard-id 1 --num-shards 2 "
      "--data-dir " +
          data,
      "timeout -s TERM 20");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output,
              testing::HasSubstr(
                  "holds shard 0 of 2, but this server is shard 1 of 2"));
}

TEST_F(CliTest, MalformedLineNamesFileAndLine) {
  std::string path = Write("bad.txt", "1 2 10\n2 3 11\n3 x 12\n4 5 13\n");
  Result r = Mnemo("data " + path);
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.output, testing::HasSubstr(path + ":3"));
  r = Mnemo("train --data " + path + " --epochs 1");
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.output, testing::HasSubstr(path + ":3"));
  r = Mnemo("data --skip-bad-lines " + path);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("1 bad lines skipped"));
}

// The test AP of a summary.json, as written.
std::string TestAp(const std::string& summary) {
  const std::string s = ReadFile(summary);
  const size_t test = s.find("\"test\": {");
  const size_t ap = s.find("\"ap\": ", test);
  if (test == std::string::npos || ap == std::string::npos) return "";
  return s.substr(ap, s.find_first_of(",\n", ap) - ap);
}

TEST_F(CliTest, AConvertedFileTrainsAsItsSource) {
  const char* shared = std::getenv("MNEMO_SHARED_DATA");
  const std::string mnev = (dir_ / "collegemsg.mnev").string();
  Result r =
      Mnemo("data --convert collegemsg --data-dir " +
            std::string(shared ? shared : "../shared/data") + " --out " + mnev);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("59835 events, 1899 nodes"));
  r = Mnemo("data --json " + mnev);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("\"columnar\": true"));
  EXPECT_THAT(r.output, testing::HasSubstr("\"train_events\": 34352"));
  const std::string small =
      " --max-events 2000 --epochs 1 --threads 1 --progress none --seed 3 "
      "--memory-dim 16 --time-dim 16 --embedding-dim 16 --out ";
  r = Mnemo(SmallTrain().substr(0, SmallTrain().find(" --max-events")) + small +
            (dir_ / "text").string());
  ASSERT_EQ(r.code, 0) << r.output;
  r = Mnemo("train --data " + mnev + small + (dir_ / "mapped").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string ap = TestAp((dir_ / "text" / "summary.json").string());
  EXPECT_FALSE(ap.empty());
  EXPECT_EQ(ap, TestAp((dir_ / "mapped" / "summary.json").string()));
  // Usage mistakes and a damaged file.
  r = Mnemo("data --convert collegemsg wikipedia --out " + mnev);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, testing::HasSubstr("--convert takes one dataset"));
  const std::string bytes = ReadFile(mnev);
  const std::string cut = Write("cut.mnev", bytes.substr(0, 5000));
  r = Mnemo("train --data " + cut + " --epochs 1");
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.output,
              testing::HasSubstr("cut.mnev: not a valid columnar event file"));
}

TEST_F(CliTest, DirectoryAsDataSaysWhatToDo) {
  Result r = Mnemo("train --data " + dir_.string());
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.output, testing::HasSubstr("is a directory"));
  EXPECT_THAT(r.output, testing::HasSubstr("--data-dir"));
}

TEST_F(CliTest, EmptyAndMissingFiles) {
  Result r = Mnemo("data " + Write("empty.txt", ""));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.output, testing::HasSubstr("empty.txt"));
  r = Mnemo("train --data " + (dir_ / "missing.txt").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.output, testing::HasSubstr("missing.txt"));
}

// The number after "key": in a summary.json (NaN when absent).
double SummaryNumber(const std::string& summary, const std::string& key) {
  const std::string s = ReadFile(summary);
  const size_t at = s.find("\"" + key + "\": ");
  if (at == std::string::npos) return std::nan("");
  return std::strtod(s.c_str() + at + key.size() + 4, nullptr);
}

// --lr is the rate at a 600-event global batch: depbloom (here 2400 events
// per worker) scales it by sqrt(global batch / 600), with JODIE by global
// batch / 600, unless --lr is given, other policies when asked; config.lr is
// the rate trained with.
TEST_F(CliTest, LearningRateFollowsTheGlobalBatch) {
  const struct {
    std::string args;
    double lr, scale;
  } cases[] = {{"", 1e-4, 1},
               {"--lr-scaling sqrt --batch-size 2400", 2e-4, 2},
               {"--lr-scaling linear --batch-size 1200", 2e-4, 2},
               {"--workers 2 --policy depbloom --batch-size 2400",
                1e-4 * std::sqrt(8.0), std::sqrt(8.0)},
               {"--workers 2 --policy depbloom --batch-size 2400 --model jodie",
                8e-4, 8},
               {"--workers 2 --policy depbloom --lr 1e-4", 1e-4, 1},
               {"--workers 2 --policy depbloom --lr 1e-4 --lr-scaling sqrt "
                "--batch-size 600",
                1e-4 * std::sqrt(2.0), std::sqrt(2.0)}};
  int i = 0;
  for (const auto& c : cases) {
    const std::string out = (dir_ / ("run" + std::to_string(i++))).string();
    Result r = Mnemo(SmallTrain() + " " + c.args + " --out " + out);
    ASSERT_EQ(r.code, 0) << c.args << ": " << r.output;
    const std::string summary = out + "/summary.json";
    EXPECT_NEAR(SummaryNumber(summary, "lr"), c.lr, 1e-9) << c.args;
    EXPECT_NEAR(SummaryNumber(summary, "lr_scale"), c.scale, 1e-6) << c.args;
  }
}

// depbloom's window and batch follow the data where they are not given
// (trainer/runtime/depbloom_sizes.h): said at start, recorded in
// summary.json, with --lr scaled to the derived batch, and the same
// command resumes; values given by hand are kept, and warned about where
// they cannot work.
TEST_F(CliTest, DepBloomSizesFollowTheData) {
  const std::string train =
      SmallTrain() + " --workers 2 --policy depbloom --progress lines";
  const std::string out = (dir_ / "derived").string();
  Result r = Mnemo(train + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string summary = out + "/summary.json";
  const auto n = static_cast<int64_t>(SummaryNumber(summary, "train_events"));
  ASSERT_GT(n, 0);
  const mnemo::runtime::DepBloomSizes s =
      mnemo::runtime::DeriveDepBloomSizes(n, 2, 0, 0);
  EXPECT_EQ(SummaryNumber(summary, "window_events"), s.window_events);
  EXPECT_EQ(SummaryNumber(summary, "batch_size"), s.batch_size);
  EXPECT_THAT(
      ReadFile(summary),
      testing::HasSubstr("\"derived_sizes\": \"window_events,batch_size\""));
  EXPECT_NEAR(SummaryNumber(summary, "lr"),
              1e-4 * std::sqrt(2.0 * s.batch_size / 600), 1e-9);
  EXPECT_THAT(r.output, testing::HasSubstr(
                            "[trainer 0] " +
                            mnemo::runtime::DescribeDepBloomSizes(s, n, 2)));
  EXPECT_THAT(r.output,
              testing::HasSubstr(std::to_string(s.windows) + " windows"));
  EXPECT_THAT(r.output, testing::Not(testing::HasSubstr("warning: --")));
  // The same command resumes: the derived values are not changed flags.
  r = Mnemo(train + " --epochs 2 --resume " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("resuming from"));
  EXPECT_EQ(SummaryNumber(summary, "window_events"), s.window_events);
  // The paper's values given by hand: kept, and warned about.
  const std::string given = (dir_ / "given").string();
  r = Mnemo(train + " --window-events 80000 --batch-size 2400 --out " + given);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(SummaryNumber(given + "/summary.json", "window_events"), 80000);
  EXPECT_EQ(SummaryNumber(given + "/summary.json", "batch_size"), 2400);
  EXPECT_THAT(ReadFile(given + "/summary.json"),
              testing::HasSubstr("\"derived_sizes\": \"\""));
  EXPECT_THAT(r.output, testing::HasSubstr("warning: --window-events 80000 "
                                           "holds all " +
                                           std::to_string(n) +
                                           " training events in one window"));
  EXPECT_THAT(r.output,
              testing::HasSubstr("warning: --window-events 80000 with batches "
                                 "of 2400 events per worker leaves"));
  // Resuming the derived run with a window given is a changed flag.
  r = Mnemo(train + " --epochs 3 --window-events 80000 --resume " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("--window-events auto -> 80000"));
}

TEST_F(CliTest, TrainWithConfigWritesSummary) {
  std::string config = Write("c.yaml",
                             "model: jodie\nepochs: 1\nbatch-size: 300\n"
                             "memory-dim: 16\nmax-events: 6000\nthreads: 1\n");
  const char* shared = std::getenv("MNEMO_SHARED_DATA");
  std::string out = (dir_ / "run").string();
  Result r =
      Mnemo("train --data collegemsg --data-dir " +
            std::string(shared ? shared : "../shared/data") + " --config " +
            config + " --batch-size 200 --out " + out + " --progress lines");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("epoch 1/1"));
  EXPECT_THAT(r.output, testing::HasSubstr("val AP"));
  std::ifstream in(out + "/summary.json");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_THAT(ss.str(), testing::HasSubstr("\"model\": \"jodie\""));
  EXPECT_THAT(ss.str(), testing::HasSubstr("\"batch_size\": 200"));
  EXPECT_THAT(ss.str(), testing::HasSubstr("\"memory_dim\": 16"));
  EXPECT_TRUE(fs::exists(out + "/metrics.csv"));
  EXPECT_TRUE(fs::exists(out + "/checkpoints/epoch-0001.pt"));
}

// LibTorch's errors end the run with a message, not an abort with a stack
// trace; a checkpoint of other widths is refused before training.
TEST_F(CliTest, TorchErrorsAndOtherWidthsOnResumeAreErrors) {
  const char* shared = std::getenv("MNEMO_SHARED_DATA");
  const std::string train =
      "train --data collegemsg --data-dir " +
      std::string(shared ? shared : "../shared/data") +
      " --max-events 2000 --epochs 1 --threads 1 --progress none";
  // Widths within their ranges whose weights (GBs at 8192) exceed what
  // the process may allocate (its data limit, 1 GiB): LibTorch refuses.
  Result r = Mnemo(train +
                       " --memory-dim 8192 --time-dim 8192 --embedding-dim "
                       "8192",
                   "ulimit -d 1048576;");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("mnemo train: LibTorch: "));
  EXPECT_THAT(r.output, testing::Not(testing::HasSubstr("frame #")));
  const std::string out = (dir_ / "run").string();
  r = Mnemo(train + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string checkpoint = out + "/checkpoints/epoch-0001.pt";
  const auto size = fs::file_size(checkpoint);
  // Another width is a changed flag: refused before anything starts ...
  r = Mnemo(train + " --epochs 2 --resume " + out + " --time-dim 50");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("--time-dim 100 -> 50"));
  // ... and where overridden, the shapes are checked before training.
  r = Mnemo(train + " --epochs 2 --resume " + out +
            " --time-dim 50 --resume-override time-dim");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("the checkpoint's parameter"));
  EXPECT_THAT(r.output, testing::Not(testing::HasSubstr("frame #")));
  EXPECT_EQ(fs::file_size(checkpoint), size);  // left as it was
}

// A run owns its --out: a second run into it is refused (its checkpoints
// would be resumed later as the first run's), and so is a run while
// another holds the directory's lock.
TEST_F(CliTest, ReusedOutIsRefused) {
  const std::string train = SmallTrain();
  const std::string out = (dir_ / "run").string();
  Result r = Mnemo(train + " --epochs 2 --lr 0.001 --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string summary = ReadFile(out + "/summary.json");
  r = Mnemo(train + " --epochs 1 --out " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("already holds another run's "
                                           "checkpoints"));
  EXPECT_THAT(r.output, testing::HasSubstr("epoch-0002.pt"));
  EXPECT_EQ(ReadFile(out + "/summary.json"), summary);  // untouched
  // The run id is recorded, and kept by --resume.
  EXPECT_THAT(summary, testing::ContainsRegex("\"run_id\": \"[0-9a-f]{16}\""));
  // A finished run resumed with its own --epochs: nothing to train, and
  // its summary (timings included) stands.
  r = Mnemo(train + " --epochs 2 --lr 0.001 --resume " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("nothing to train"));
  EXPECT_EQ(ReadFile(out + "/summary.json"), summary);
  r = Mnemo(train + " --epochs 3 --lr 0.001 --resume " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string id = summary.substr(summary.find("\"run_id\""), 28);
  EXPECT_THAT(ReadFile(out + "/summary.json"), testing::HasSubstr(id));
}

TEST_F(CliTest, OutInUseIsRefused) {
  const std::string out = (dir_ / "busy").string();
  fs::create_directories(out);
  // This process holds the lock, as a running `mnemo train` would.
  const int fd = open((out + "/LOCK").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
  const std::string pid = "pid " + std::to_string(getpid()) + "\n";
  ASSERT_EQ(write(fd, pid.data(), pid.size()), ssize_t(pid.size()));
  Result r = Mnemo(SmallTrain() + " --out " + out);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("is in use by another run (pid " +
                                           std::to_string(getpid())));
  r = Mnemo(SmallTrain() + " --workers 2 --out " + out);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("is in use by another run"));
  EXPECT_FALSE(fs::exists(out + "/cluster"));  // nothing started
  close(fd);
  r = Mnemo(SmallTrain() + " --out " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  // An --out that cannot be written is found before training, not after
  // the first epoch.
  const std::string file = Write("a-file", "x");
  r = Mnemo(SmallTrain() + " --out " + file + "/run");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("cannot create the directory"));
  EXPECT_THAT(r.output, testing::Not(testing::HasSubstr("epoch 1/")));
}

// --resume compares the flags that define the result with the checkpoint's
// and names each one that differs; --resume-override allows them.
TEST_F(CliTest, ResumeRefusesChangedFlags) {
  const std::string train = SmallTrain();
  const std::string out = (dir_ / "run").string();
  Result r = Mnemo(train + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  for (const auto& [flag, named] :
       std::vector<std::pair<std::string, std::string>>{
           {"--lr 0.01", "--lr 0.0001 -> 0.01"},
           {"--heads 1", "--heads 2 -> 1"},
           {"--neighbors 5", "--neighbors 10 -> 5"},
           {"--protocol mnemo", "--protocol tgn-reference -> mnemo"},
           {"--neighbor-strategy uniform", "--neighbor-strategy"},
           {"--dropout 0.2", "--dropout default -> 0.2"},
           {"--batch-size 100", "--batch-size 600 -> 100"},
           {"--precision bf16", "--precision fp32 -> bf16"},
           {"--max-events 1500", "--max-events 2000 -> 1500"},
           {"--seed 3", "--seed 0 -> 3"}}) {
    r = Mnemo(train + " --epochs 2 --resume " + out + " " + flag);
    EXPECT_EQ(r.code, 2) << flag << ": " << r.output;
    EXPECT_THAT(r.output, testing::HasSubstr(named)) << flag;
    EXPECT_THAT(r.output, testing::HasSubstr("--resume-override")) << flag;
  }
  EXPECT_FALSE(fs::exists(out + "/checkpoints/epoch-0002.pt"));
  r = Mnemo(train + " --epochs 2 --resume " + out + " --resume-override bogus");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("'bogus' is not a flag"));
  // More epochs are not a change; an override is allowed and said.
  r = Mnemo(train + " --epochs 2 --resume " + out +
            " --lr 0.0002 --resume-override lr");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("warning: --resume-override lr"));
  EXPECT_TRUE(fs::exists(out + "/checkpoints/epoch-0002.pt"));
}

// Checkpoints carry a checksum: a flipped bit or NaN bytes are refused
// naming the file, not loaded; no checkpoint to resume is a usage error.
TEST_F(CliTest, DamagedCheckpointsAreRefused) {
  const std::string train = SmallTrain();
  const std::string out = (dir_ / "run").string();
  fs::create_directories(out);  // (a missing one: ResumeOfAMissingDirectory...)
  Result r = Mnemo(train + " --resume " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("no checkpoint to resume from"));
  r = Mnemo(train + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string file = out + "/checkpoints/epoch-0001.pt";
  const std::string good = ReadFile(file);
  for (const size_t at :
       {size_t{100}, good.size() / 2, good.size() - 40, good.size() - 5}) {
    std::string bad = good;
    bad[at] ^= 0x10;
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bad;
    r = Mnemo(train + " --epochs 2 --resume " + out);
    EXPECT_EQ(r.code, 1) << at << ": " << r.output;
    EXPECT_THAT(r.output, testing::HasSubstr(file + " is damaged")) << at;
  }
  // Truncated.
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      << good.substr(0, good.size() / 3);
  r = Mnemo(train + " --epochs 2 --resume " + out);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, testing::HasSubstr("is damaged"));
  std::ofstream(file, std::ios::binary | std::ios::trunc) << good;
  r = Mnemo(train + " --epochs 2 --resume " + out);
  EXPECT_EQ(r.code, 0) << r.output;
}

// A full disk ends the run with a clear error (exit 1), leaves no partial
// file, and keeps what was written before. Needs a small tmpfs (root).
TEST_F(CliTest, FullDiskIsAClearError) {
  const fs::path disk = dir_ / "disk";
  fs::create_directories(disk);
  // Room for one checkpoint (about 290 KB here) but not for two.
  const std::string mount =
      "mount -t tmpfs -o size=400k mnemo-test " + disk.string() + " 2>&1";
  if (std::system(mount.c_str()) != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  }
  const std::string out = (disk / "run").string();
  const std::string first = out + "/checkpoints/epoch-0001.pt";
  std::string kept;
  for (const char* args : {" --epochs 2 --out ", " --epochs 2 --resume "}) {
    // The second epoch's checkpoint does not fit; nor does it on resume.
    Result r = Mnemo(SmallTrain() + args + out);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_THAT(r.output, testing::HasSubstr("checkpoint of epoch 2: cannot "
                                             "write"));
    EXPECT_THAT(r.output, testing::HasSubstr("No space left on device"));
    EXPECT_THAT(r.output, testing::Not(testing::HasSubstr("frame #")));
    std::vector<std::string> left;
    for (const auto& e : fs::recursive_directory_iterator(disk)) {
      if (e.path().extension() == ".tmp") left.push_back(e.path().string());
    }
    EXPECT_THAT(left, testing::IsEmpty());
    EXPECT_FALSE(fs::exists(out + "/checkpoints/epoch-0002.pt"));
    if (kept.empty()) kept = ReadFile(first);
    EXPECT_EQ(ReadFile(first), kept);  // the first checkpoint is intact
  }
}

// A trainer gives up joining a coordinator that accepts connections but
// never answers (hung) after --connect-timeout, naming it.
TEST_F(CliTest, TrainerGivesUpOnAHungCoordinator) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 16), 0);  // connections complete; nothing answers
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string coordinator =
      "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  const auto t0 = std::chrono::steady_clock::now();
  Result r = Mnemo(
      "trainer --rank 0 --world-size 2 --connect-timeout 2 "
      "--timeout 1 --coordinator " +
      coordinator);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  close(fd);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output,
              testing::HasSubstr("joining the coordinator at " + coordinator));
  EXPECT_LT(took, 15) << r.output;
  r = Mnemo(
      "trainer --connect-timeout 0 --rank 0 --world-size 1 "
      "--coordinator 127.0.0.1:1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output,
              testing::HasSubstr("--connect-timeout must be in (0, 86400]"));
}

}  // namespace
