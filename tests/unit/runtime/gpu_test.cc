// Training on a GPU (--device cuda): what only a machine with one can run.
// Each test skips with "no CUDA GPU" elsewhere (ctest reports the binary
// as skipped: SKIP_REGULAR_EXPRESSION). scripts/device-check runs them on
// the GPU machine.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "memstore/node_state_store.h"
#include "tests/unit/runtime/train_test_util.h"
#include "trainer/batch/staging.h"
#include "trainer/memory/node_memory_test_peer.h"
#include "trainer/memory/record_codec.h"
#include "trainer/memory/store_exchange.h"
#include "trainer/platform/cuda_device.h"
#include "trainer/platform/cuda_transfer.h"
#include "trainer/runtime/cluster/collectives.h"
#include "trainer/runtime/optim/fused_adam.h"
#include "trainer/runtime/train.h"
#include "util/status_matchers.h"

namespace mnemo::runtime {
namespace {
namespace fs = std::filesystem;
using testing::Quiet;
using testing::SmallRun;

// cuBLAS is deterministic only with a fixed workspace configuration, read
// when it first runs: set before main() (an operator's own setting wins).
const bool kCublasWorkspaceSet =
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0) == 0;

// LibTorch's deterministic algorithms for the scope: no atomics-ordered
// sums (index_add, scatter_add and their backward take sorted paths), so
// that two GPU runs of one configuration agree bit for bit. An operator
// with no deterministic implementation throws, naming itself.
class Deterministic {
 public:
  Deterministic() {
    EXPECT_TRUE(kCublasWorkspaceSet);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    at::globalContext().setDeterministicCuDNN(true);
  }
  ~Deterministic() {
    at::globalContext().setDeterministicAlgorithms(false, false);
    at::globalContext().setDeterministicCuDNN(false);
  }
  Deterministic(const Deterministic&) = delete;
  Deterministic& operator=(const Deterministic&) = delete;
};

#define SKIP_WITHOUT_GPU()                                                \
  if (platform::CudaDeviceCount() == 0) {                                 \
    GTEST_SKIP() << "no CUDA GPU: " << platform::CudaUnavailableReason(); \
  }

fs::path TempDir(const std::string& name) {
  fs::path d = fs::temp_directory_path() /
               ("mnemo_gpu_test_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  return d;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class GpuModelTest : public ::testing::TestWithParam<model::ModelKind> {};

// Every model trains on the GPU deterministically and to the CPU's
// accuracy, and the summary names the device. With deterministic
// algorithms two GPU runs agree exactly, losses and AP: a GPU-only error
// that changes results from run to run (a race, an unordered stream) shows
// there. Against the CPU (no dropout: its masks come from another
// generator on the GPU) only the order of sums and TF32's rounding differ,
// which one seed's AP noise (0.02) covers: that comparison catches a GPU
// path that computes something else.
TEST_P(GpuModelTest, TrainsTheSameTwiceAndAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  TrainOptions o = SmallRun();
  o.model.kind = GetParam();
  o.data.max_events = 8000;
  o.optim.epochs = 2;
  o.model.dropout = 0;
  auto cpu = Train(o, Quiet());
  ASSERT_THAT(cpu, IsOk());
  o.compute.device = *ParseDevice("cuda");
  fs::path out = TempDir("model");
  o.run.out_dir = out.string();
  const std::string name(model::ModelName(o.model.kind));
  Deterministic deterministic;
  auto gpu = Train(o, Quiet());
  ASSERT_THAT(gpu, IsOk()) << name;
  o.run.out_dir.clear();
  auto again = Train(o, Quiet());
  ASSERT_THAT(again, IsOk()) << name;
  ASSERT_EQ(gpu->epochs.size(), again->epochs.size());
  for (size_t e = 0; e < gpu->epochs.size(); ++e) {
    EXPECT_EQ(gpu->epochs[e].train_loss, again->epochs[e].train_loss)
        << name << " epoch " << e + 1;
    EXPECT_EQ(gpu->epochs[e].val_ap, again->epochs[e].val_ap)
        << name << " epoch " << e + 1;
  }
  EXPECT_EQ(gpu->test.ap, again->test.ap) << name;
  EXPECT_EQ(gpu->parameter_checksum, again->parameter_checksum) << name;
  EXPECT_NEAR(gpu->test.ap, cpu->test.ap, 0.02)
      << name << ": GPU " << gpu->test.ap << ", CPU " << cpu->test.ap;
  EXPECT_NEAR(gpu->test.new_node_ap, cpu->test.new_node_ap, 0.02);
  const std::string summary = ReadFile(out / "summary.json");
  EXPECT_NE(summary.find("\"device\": \"cuda:0\""), std::string::npos);
  EXPECT_EQ(summary.find("\"gpu_name\": \"\""), std::string::npos);
  EXPECT_NE(summary.find("\"tf32\": true"), std::string::npos);
  EXPECT_EQ(summary.find("\"peak_gpu_bytes\": 0,"), std::string::npos);
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(
    Models, GpuModelTest,
    ::testing::Values(model::ModelKind::kTgn, model::ModelKind::kJodie,
                      model::ModelKind::kApan, model::ModelKind::kTgat,
                      model::ModelKind::kDysat),
    [](const auto& info) { return std::string(model::ModelName(info.param)); });

TEST(GpuTest, Bf16TrainsAsFp32) {
  SKIP_WITHOUT_GPU();
  TrainOptions o = SmallRun();
  o.data.max_events = 8000;
  o.model.dropout = 0;
  o.compute.device = *ParseDevice("cuda:0");
  auto fp32 = Train(o, Quiet());
  ASSERT_THAT(fp32, IsOk());
  o.optim.precision = Precision::kBf16;
  auto bf16 = Train(o, Quiet());
  ASSERT_THAT(bf16, IsOk());
  EXPECT_NEAR(bf16->test.ap, fp32->test.ap, 0.03);
}

// A checkpoint written on the GPU resumes on the CPU, and the other way
// round, to what an uninterrupted run on the second device reaches.
TEST(GpuTest, CheckpointsMoveBetweenDevices) {
  SKIP_WITHOUT_GPU();
  for (const bool gpu_first : {true, false}) {
    TrainOptions o = SmallRun();
    o.data.max_events = 8000;
    o.model.dropout = 0;
    TrainOptions whole = o;
    whole.compute.device = gpu_first ? Device() : *ParseDevice("cuda");
    auto uninterrupted = Train(whole, Quiet());
    ASSERT_THAT(uninterrupted, IsOk());
    o.optim.epochs = 1;
    fs::path dir = TempDir(gpu_first ? "g2c" : "c2g");
    o.run.out_dir = dir.string();
    if (gpu_first) o.compute.device = *ParseDevice("cuda");
    ASSERT_THAT(Train(o, Quiet()), IsOk());
    o.optim.epochs = 2;
    o.run.resume_dir = dir.string();
    o.compute.device = gpu_first ? Device() : *ParseDevice("cuda");
    auto resumed = Train(o, Quiet());
    ASSERT_THAT(resumed, IsOk()) << (gpu_first ? "GPU -> CPU" : "CPU -> GPU");
    ASSERT_EQ(resumed->epochs.size(), 2u);
    // The first epoch's figures come from the checkpoint.
    EXPECT_NEAR(resumed->epochs[0].val_ap, uninterrupted->epochs[0].val_ap,
                0.02);
    EXPECT_NEAR(resumed->test.ap, uninterrupted->test.ap, 0.02);
    fs::remove_all(dir);
  }
}

// State records packed from GPU memory equal those from the same memory on
// the host, and unpacking into GPU memory gives the host's rows.
TEST(GpuTest, RecordCodecOnTheGpu) {
  SKIP_WITHOUT_GPU();
  memory::RecordLayout layout = model::LayoutOf(
      [] {
        model::ModelOptions m;
        m.memory_dim = 8;
        return m;
      }(),
      /*edge_dim=*/3);
  memory::NodeMemory host;
  host.Reset(layout, 50);
  torch::manual_seed(3);
  host.memory().normal_();
  host.mail().normal_();
  for (int64_t u = 0; u < 50; u += 3) {
    memory::NodeMemoryTestPeer(&host).has_mail()[u] = 1;
    memory::NodeMemoryTestPeer(&host).last_update()[u] = 10.0 * u + 0.25;
    memory::NodeMemoryTestPeer(&host).mail_time()[u] = 10.0 * u + 1.5;
    memory::NodeMemoryTestPeer(&host).last_event()[u] = u;
  }
  memory::NodeMemory gpu;
  gpu.Reset(layout, 50, torch::Device(torch::kCUDA, 0));
  {
    memory::NodeMemoryTestPeer g(&gpu), h(&host);
    g.memory().copy_(h.memory());
    g.mail().copy_(h.mail());
    g.has_mail() = h.has_mail();
    g.last_update() = h.last_update();
    g.mail_time() = h.mail_time();
    g.last_event() = h.last_event();
  }
  const std::vector<int64_t> nodes = {0, 3, 7, 49, 12};
  const memory::StateVersions versions{1000, 1};
  auto owned = [](int64_t) { return true; };
  std::vector<float> rh, rg;
  std::vector<uint64_t> vh, vg;
  std::vector<double> th, tg;
  memory::PackStates(host, nodes, versions, owned, {}, &rh, &vh, &th);
  memory::PackStates(gpu, nodes, versions, owned, {}, &rg, &vg, &tg);
  EXPECT_EQ(rh, rg);
  EXPECT_EQ(vh, vg);
  EXPECT_EQ(th, tg);

  memstore::PulledStates pulled;
  pulled.states = rh;
  pulled.version = vh;
  pulled.time = th;
  memory::NodeMemory to_host, to_gpu;
  to_host.Reset(layout, 50);
  to_gpu.Reset(layout, 50, torch::Device(torch::kCUDA, 0));
  memory::UnpackStates(pulled, nodes, versions, &to_host);
  memory::UnpackStates(pulled, nodes, versions, &to_gpu);
  EXPECT_TRUE(torch::equal(to_host.memory(), to_gpu.memory().cpu()));
  EXPECT_TRUE(torch::equal(to_host.mail(), to_gpu.mail().cpu()));
  EXPECT_EQ(to_host.last_update(), to_gpu.last_update());
  EXPECT_EQ(to_host.has_mail(), to_gpu.has_mail());
}

// A push packed from GPU memory with its rows left for later (a vanilla
// worker's push beside the optimizer step) queues its gather and copy
// without making the host wait, and sends the states as they were when
// packed, though kernels that change the memory were queued before the
// push thread read them.
TEST(GpuTest, PushPackedFromTheGpuSendsTheStatesAsPacked) {
  SKIP_WITHOUT_GPU();
  platform::SetCudaDevice(0);
  memory::RecordLayout layout = model::LayoutOf(
      [] {
        model::ModelOptions m;
        m.memory_dim = 8;
        return m;
      }(),
      /*edge_dim=*/3);
  const int64_t n = 5000;
  memory::NodeMemory gpu;
  gpu.Reset(layout, n, torch::Device(torch::kCUDA, 0));
  std::vector<int64_t> nodes;
  for (int64_t u = 0; u < n; u += 7) {
    nodes.push_back(u);
    memory::NodeMemoryTestPeer(&gpu).has_mail()[u] = 1;
    memory::NodeMemoryTestPeer(&gpu).last_update()[u] = 0.5 * u;
    memory::NodeMemoryTestPeer(&gpu).mail_time()[u] = 1.0 * u;
    memory::NodeMemoryTestPeer(&gpu).last_event()[u] = u;
  }
  torch::manual_seed(5);
  gpu.memory().normal_();
  gpu.mail().normal_();
  const torch::Tensor memory_then = gpu.memory().cpu();
  const torch::Tensor mail_then = gpu.mail().cpu();

  memstore::NodeStateStoreOptions so;
  so.dim = static_cast<int>(layout.RecordFloats());
  auto store = memstore::Open(so);
  ASSERT_THAT(store, IsOk());
  memory::StoreTraffic traffic;
  memory::WorkingSetStats working_set;
  memory::StoreExchange sync(
      store->get(), &gpu, [](int64_t) { return true; }, 0, &traffic,
      &working_set);
  const memory::StateVersions versions{n, 1};
  platform::SetCudaSyncCheck(true);
  absl::Status status;
  memory::PackedStates packed;
  try {
    packed = sync.Pack(nodes, versions, &status, /*rows_later=*/true);
  } catch (const std::exception& e) {
    platform::SetCudaSyncCheck(false);
    FAIL() << "Pack made the host wait for the device: " << e.what();
  }
  platform::SetCudaSyncCheck(false);
  ASSERT_THAT(status, IsOk());
  // Work queued after the pack: long, and it changes the memory.
  torch::Tensor busy = torch::rand({4096, 4096}, torch::kCUDA);
  for (int i = 0; i < 8; ++i) busy = busy.matmul(busy).tanh_();
  gpu.memory().add_(busy.mean());
  gpu.mail().mul_(-1);
  absl::Status pushed;
  std::thread pusher([&] { pushed = sync.PushPacked(&packed); });
  pusher.join();
  ASSERT_THAT(pushed, IsOk());

  memory::NodeMemory host;
  host.Reset(layout, n);
  memory::StoreTraffic reader_traffic;
  memory::WorkingSetStats reader_working_set;
  memory::StoreExchange reader(
      store->get(), &host, [](int64_t) { return false; }, 1, &reader_traffic,
      &reader_working_set);
  ASSERT_THAT(reader.Pull(nodes, versions), IsOk());
  const torch::Tensor index = torch::tensor(nodes);
  EXPECT_TRUE(torch::equal(host.memory().index_select(0, index),
                           memory_then.index_select(0, index)));
  EXPECT_TRUE(torch::equal(host.mail().index_select(0, index),
                           mail_then.index_select(0, index)));
  for (const int64_t u : nodes) {
    ASSERT_EQ(host.last_event()[u], u);
    ASSERT_EQ(host.last_update()[u], 0.5 * u);
  }
}

// A batch staged on the copy stream is what the compute stream reads: a
// kernel queued on the compute stream right after the staging, with no
// synchronization in between, sees the copied values, and the host may
// overwrite its buffers at once. The copy stream is the slow one here: a
// large copy queued on it first holds the batch's copy back by tens of
// milliseconds while the compute stream is idle, so a read not ordered
// after the copy would run at once and see memory not yet written.
TEST(GpuTest, StagedBatchIsOrderedBeforeTheComputeStream) {
  SKIP_WITHOUT_GPU();
  const torch::Device gpu(torch::kCUDA, 0);
  platform::SetCudaDevice(0);
  torch::manual_seed(5);
  torch::Tensor a = torch::rand({1 << 22});
  torch::Tensor b = torch::randint(0, 1000, {1 << 20}, torch::kInt64);
  torch::Tensor m = torch::rand({1 << 20}) > 0.5;
  const torch::Tensor a0 = a.clone(), b0 = b.clone(), m0 = m.clone();
  // 1 GiB from pinned memory: 20-40 ms on the copy stream (PCIe 5 / 4).
  torch::Tensor ballast = torch::ones(
      {int64_t{1} << 28}, torch::TensorOptions().pinned_memory(true));
  platform::SynchronizeCuda();  // the compute stream idle from here
  torch::Tensor ballast_gpu = platform::CopyToDeviceOnCopyStream(ballast, gpu);
  std::vector<torch::Tensor*> tensors = {&a, &b, &m};
  const int64_t bytes =
      batch::StagePacked(tensors, /*pinned=*/true, [&](const torch::Tensor& h) {
        return platform::CopyToDeviceOnCopyStream(h, gpu);
      });
  EXPECT_GE(bytes, (int64_t{1} << 24) + (int64_t{1} << 23) + (1 << 20));
  // Queued on the compute stream, no synchronization before it.
  torch::Tensor sum_a = a.sum();
  torch::Tensor sum_b = b.sum();
  torch::Tensor count_m = m.sum();
  EXPECT_TRUE(a.is_cuda());
  EXPECT_NEAR(sum_a.item<double>(), a0.sum().item<double>(), 1e-2);
  EXPECT_EQ(sum_b.item<int64_t>(), b0.sum().item<int64_t>());
  EXPECT_EQ(count_m.item<int64_t>(), m0.sum().item<int64_t>());
  EXPECT_TRUE(torch::equal(a.cpu(), a0));
  EXPECT_TRUE(torch::equal(b.cpu(), b0));
  EXPECT_TRUE(torch::equal(m.cpu(), m0));
  EXPECT_EQ(ballast_gpu.sum().item<double>(), static_cast<double>(1 << 28));
}

// The phase clock times work on the device without waiting for it: a
// phase of many large products takes longer than an empty one, both are
// added where Collect() waits, and a discarded phase adds nothing.
TEST(GpuTest, PhaseClockTimesTheDeviceWithoutWaiting) {
  SKIP_WITHOUT_GPU();
  platform::SetCudaDevice(0);
  platform::CudaPhaseClock clock(0);
  double busy = 0, idle = 0, both = 0, discarded = 0;
  torch::Tensor x = torch::rand({4096, 4096}, torch::kCUDA);
  // Recording phases never makes the host wait: with the sync check on,
  // a wait would throw here.
  platform::SetCudaSyncCheck(true);
  EXPECT_NO_THROW({
    clock.Begin();
    for (int i = 0; i < 16; ++i) x = x.matmul(x).tanh_();
    clock.End({&busy, &both});
    clock.Begin();
    clock.End({&idle, &both});
  });
  platform::SetCudaSyncCheck(false);
  EXPECT_EQ(busy, 0);  // nothing is added before Collect()
  clock.Collect();
  EXPECT_GT(busy, 0);
  EXPECT_GE(idle, 0);
  EXPECT_GT(busy, idle);
  EXPECT_DOUBLE_EQ(both, busy + idle);
  clock.Begin();
  x = x.matmul(x);
  clock.End({&discarded});
  clock.Discard();
  clock.Collect();
  EXPECT_EQ(discarded, 0);
  EXPECT_TRUE(x.isfinite().all().item<bool>());
}

// On a GPU, Adam steps every parameter in LibTorch's fused multi-tensor
// kernel: the same steps as LibTorch's Adam on the CPU, to float rounding.
TEST(GpuTest, FusedAdamOnTheGpuStepsAsLibTorchAdam) {
  SKIP_WITHOUT_GPU();
  torch::manual_seed(6);
  std::vector<torch::Tensor> cpu = {torch::randn({40000}),
                                    torch::randn({7, 5})};
  std::vector<torch::Tensor> gpu;
  for (auto& t : cpu) {
    t.requires_grad_();
    gpu.push_back(t.detach().to(torch::kCUDA).requires_grad_());
  }
  FusedAdam fused(gpu, torch::optim::AdamOptions(1e-3));
  torch::optim::Adam plain(cpu, torch::optim::AdamOptions(1e-3));
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < cpu.size(); ++i) {
      torch::Tensor g = torch::randn(cpu[i].sizes());
      cpu[i].mutable_grad() = g.clone();
      gpu[i].mutable_grad() = g.to(torch::kCUDA);
    }
    fused.step();
    plain.step();
  }
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_TRUE(torch::allclose(gpu[i].cpu(), cpu[i], 1e-5, 1e-6)) << i;
  }
}

// A value read back later is the value at the time of the read, even with
// work that changes it queued after the read.
TEST(GpuTest, ReadToHostLaterReadsWhatWasQueuedBefore) {
  SKIP_WITHOUT_GPU();
  platform::SetCudaDevice(0);
  torch::Tensor v = torch::tensor({1.5, -2.0}, torch::kCUDA).to(torch::kDouble);
  auto read = platform::ReadToHostLater(v);
  torch::Tensor busy = torch::rand({4096, 4096}, torch::kCUDA);
  for (int i = 0; i < 8; ++i) busy = busy.matmul(busy).tanh_();
  v.mul_(10);
  const torch::Tensor h = read();
  EXPECT_FALSE(h.is_cuda());
  EXPECT_EQ(h[0].item<double>(), 1.5);
  EXPECT_EQ(h[1].item<double>(), -2.0);
  EXPECT_EQ(v.cpu()[0].item<double>(), 15.0);
}

// On the GPU the next batch is built and staged while one computes, the
// phases are timed on the device, and the loss and gradient norm are read
// once per batch: the run learns exactly what the in-order loop learns
// (deterministic algorithms: no atomics reorder the GPU's sums).
TEST(GpuTest, PreparingAheadOnTheGpuComputesWhatInOrderDoes) {
  SKIP_WITHOUT_GPU();
  TrainOptions o = SmallRun();
  o.data.max_events = 8000;
  o.optim.epochs = 2;
  o.model.dropout = 0;
  o.compute.device = *ParseDevice("cuda");
  Deterministic deterministic;
  auto ahead = Train(o, Quiet());
  ASSERT_THAT(ahead, IsOk());
  o.checks.prepare_ahead = false;
  auto in_order = Train(o, Quiet());
  ASSERT_THAT(in_order, IsOk());
  for (int e = 0; e < 2; ++e) {
    EXPECT_EQ(ahead->epochs[e].train_loss, in_order->epochs[e].train_loss)
        << "epoch " << e + 1;
  }
  EXPECT_EQ(ahead->test.ap, in_order->test.ap);
  EXPECT_NE(ahead->summary_json.find("\"batch_lookahead\": \"prepare+stage\""),
            std::string::npos);
  for (const auto& [phase, seconds] : ahead->time_breakdown_seconds) {
    if (phase == "load") continue;
    EXPECT_GT(seconds, 0) << phase;
  }
}

// No CUDA call inside a training batch makes the host wait for the GPU
// (a read of a device value, a copy from pageable memory, a stream
// synchronization) but the batch's one read of its loss and gradient
// norm, for any model: with the check on, such a call fails the run
// naming it. First, that the check catches one.
TEST(GpuTest, NoBatchWaitsForTheDeviceButOnce) {
  SKIP_WITHOUT_GPU();
  platform::SetCudaDevice(0);
  {
    platform::SetCudaSyncCheck(true);
    torch::Tensor x = torch::ones({4}, torch::kCUDA);
    EXPECT_ANY_THROW(x.sum().item<float>());
    platform::SetCudaSyncCheck(false);
  }
  EXPECT_EQ(torch::ones({4}, torch::kCUDA).sum().item<float>(), 4.0f);
  for (const model::ModelKind kind :
       {model::ModelKind::kTgn, model::ModelKind::kJodie,
        model::ModelKind::kApan, model::ModelKind::kTgat,
        model::ModelKind::kDysat}) {
    TrainOptions o = SmallRun();
    o.model.kind = kind;
    o.data.max_events = 4000;
    o.optim.epochs = 1;
    o.compute.device = *ParseDevice("cuda");
    o.checks.check_device_syncs = true;
    auto r = Train(o, Quiet());
    EXPECT_THAT(r, IsOk()) << model::ModelName(kind);
  }
}

// One NCCL rank still runs its collectives (a one-GPU machine's check of
// the gradient group); the control group beside it is gloo.
TEST(GpuTest, OneRankNcclGroup) {
  SKIP_WITHOUT_GPU();
  c10d::TCPStoreOptions so;
  so.port = 0;
  so.isServer = true;
  so.waitWorkers = false;
  so.numWorkers = 1;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  platform::SetCudaDevice(0);
  CollectiveOptions o;
  o.master_port = store->getPort();
  o.backend = CollectiveOptions::Backend::kNccl;
  o.timeout = std::chrono::milliseconds(60000);
  auto nccl = Collectives::Connect(o);
  ASSERT_THAT(nccl, IsOk());
  EXPECT_STREQ((*nccl)->backend_name(), "nccl");
  torch::Tensor g = torch::full({1000}, 2.0f, torch::kCUDA);
  ASSERT_THAT((*nccl)->StartAllReduceSum(g), IsOk());
  ASSERT_THAT((*nccl)->WaitStarted(), IsOk());  // the stream waits
  EXPECT_FLOAT_EQ(g[999].item<float>(), 2.0f);
  EXPECT_EQ((*nccl)->bytes_reduced(), 4000);
  ASSERT_THAT((*nccl)->Broadcast({g}, 0), IsOk());
  ASSERT_THAT((*nccl)->Barrier(), IsOk());
}

}  // namespace
}  // namespace mnemo::runtime
