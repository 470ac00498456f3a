// Every model gives the figures it gave when they were recorded, on short
// runs on real data with one seed.
//
// Two kinds of figures, because training carries a rounding difference
// far in some models. Between two builds that round differently (LibTorch's
// GRU cell against mnemo's fused one, on one AMD EPYC), TGN's batch losses
// agree to 5e-6 over the first three batches and differ by 1e-2 from the
// fifth, and its two-epoch figures by up to 0.071; TGAT's and APAN's
// differ between an Intel Xeon and an AMD EPYC by up to 0.064 AP. The time
// encoding's parameters carry rounding furthest: Adam turns the rounding
// of their near-zero gradients into whole steps, which at time gaps of
// 1e5 s and more move the encoding, so one float sum of their gradient
// added in another order moved TGN's third batch loss on CollegeMsg by
// 1.3e-3: a change of those roundings is recorded again
// (MNEMO_GOLDEN_PRINT below). So:
// - the losses of the first three training batches, to 1e-4: any change of
//   what is computed (initialization order, a missed or reordered memory
//   update, another batch layout, the order of a step's stages, another
//   negative or neighbour draw) moves them by far more;
// - the figures after two epochs (losses, validation and test AP), within
//   kBand: training still learns what it learned.
//
// The runs use kernels that compute alike on every x86-64 CPU with AVX2
// and FMA as
// far as LibTorch lets them: MKL's conditional numerical reproducibility on
// its AVX2 code path (MKL_CBWR) and LibTorch's AVX2 kernels
// (ATEN_CPU_CAPABILITY), set before LibTorch runs its first kernel (both
// are read once). This binary holds only these tests, so no other test
// runs on the slower kernels.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "tests/unit/runtime/train_test_util.h"
#include "trainer/model/model_spec.h"
#include "trainer/runtime/train.h"
#include "util/status_matchers.h"

namespace mnemo::runtime {
namespace {

// Before main(): MKL and ATen read these at their first kernel.
const bool kReproducibleKernels = [] {
  setenv("MKL_CBWR", "AVX2,STRICT", /*overwrite=*/1);
  setenv("ATEN_CPU_CAPABILITY", "avx2", /*overwrite=*/1);
  return true;
}();

// A run's figures.
struct Figures {
  double first_batch_loss[3];  // epoch 1's first three training batches
  double loss[2];
  double val_ap[2];
  double test_ap;
  double new_node_test_ap;
};

struct Golden {
  std::string name;
  std::string dataset;
  std::string model;
  int refine_chunks;
  Figures figures;
};

// mnemo train --data D --model M --max-events 4000 --epochs 2
//   --memory-dim 32 --time-dim 32 --embedding-dim 32 --batch-size 200
//   --lr 0.001 --threads 2 --seed 7 --patience 0 [--refine-chunks 4]
// with the kernels above, on an AMD EPYC (AVX2 and FMA). MNEMO_GOLDEN_PRINT=1
// prints each run's figures in this table's form (to record them again
// after a deliberate change).
const Golden kGolden[] = {
    {"TgnCollegeMsg",
     "collegemsg",
     "tgn",
     1,
     {{1.383485079, 1.37315619, 1.349635124},
      {1.332261898, 1.218007727},
      {0.7002191347, 0.7526868166},
      0.7683957497,
      0.733192998}},
    {"TgnWikipedia",
     "wikipedia",
     "tgn",
     1,
     {{1.360603809, 1.334999561, 1.249990582},
      {1.2861, 1.05687129},
      {0.8033355118, 0.888137951},
      0.8483480167,
      0.773799169}},
    {"JodieCollegeMsg",
     "collegemsg",
     "jodie",
     1,
     {{1.386654973, 1.401886582, 1.511619568},
      {1.448968681, 1.312746048},
      {0.5672409379, 0.6502374914},
      0.6683794073,
      0.5143744418}},
    {"JodieWikipedia",
     "wikipedia",
     "jodie",
     1,
     {{1.386654973, 1.435624599, 1.480595112},
      {1.48604698, 1.360456874},
      {0.5080640575, 0.6427807013},
      0.6536469271,
      0.5414309818}},
    {"TgnWikipediaImr4",
     "wikipedia",
     "tgn",
     4,
     {{1.412285924, 1.354996204, 1.29328537},
      {1.266277134, 0.9892360717},
      {0.8652058617, 0.8697150772},
      0.8352094908,
      0.751684218}},
    {"ApanCollegeMsg",
     "collegemsg",
     "apan",
     1,
     {{1.394848347, 1.395663738, 1.39517653},
      {1.402349927, 1.38152453},
      {0.5277068551, 0.5472224418},
      0.5438842359,
      0.5081107008}},
    {"TgatCollegeMsg",
     "collegemsg",
     "tgat",
     1,
     {{1.401689529, 1.385152578, 1.356659651},
      {1.361131722, 1.264969056},
      {0.6896443966, 0.7726384631},
      0.7277992316,
      0.6702609454}},
    {"DysatCollegeMsg",
     "collegemsg",
     "dysat",
     1,
     {{1.400560021, 1.390955687, 1.385396242},
      {1.38360975, 1.320647218},
      {0.6286448076, 0.7535002934},
      0.740585415,
      0.599546669}},
};

void PrintTo(const Golden& g, std::ostream* os) { *os << g.name; }

class ModelGoldenTest : public ::testing::TestWithParam<Golden> {};

TEST_P(ModelGoldenTest, SameFiguresAsBefore) {
  const Golden& g = GetParam();
  TrainOptions o = testing::SmallRun();
  o.data.dataset = g.dataset;
  auto kind = model::ParseModelKind(g.model);
  ASSERT_THAT(kind, IsOk());
  o.model.kind = *kind;
  o.data.max_events = 4000;
  o.policy.depbloom.refine_chunks = g.refine_chunks;
  std::vector<double> batch_loss;
  TrainCallbacks cb = testing::Quiet();
  cb.batch = [&](const TrainCallbacks::Batch& b) {
    batch_loss.push_back(b.loss);
  };
  auto r = Train(o, cb);
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->epochs.size(), 2u);
  ASSERT_GE(batch_loss.size(), 3u);
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    GTEST_SKIP() << "the figures were recorded with AVX2 and FMA kernels";
  }
  const Figures& f = g.figures;
  if (std::getenv("MNEMO_GOLDEN_PRINT") != nullptr) {
    std::printf(
        "    {\"%s\", \"%s\", \"%s\", %d,\n     {{%.10g, %.10g, %.10g}, "
        "{%.10g, %.10g}, {%.10g, %.10g}, %.10g, %.10g}},\n",
        g.name.c_str(), g.dataset.c_str(), g.model.c_str(), g.refine_chunks,
        batch_loss[0], batch_loss[1], batch_loss[2], r->epochs[0].train_loss,
        r->epochs[1].train_loss, r->epochs[0].val_ap, r->epochs[1].val_ap,
        r->test.ap, r->test.new_node_ap);
  }
  constexpr double kTol = 1e-4;
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(batch_loss[i], f.first_batch_loss[i], kTol)
        << "training batch " << i + 1;
  }
  constexpr double kBand = 0.15;
  for (int e = 0; e < 2; ++e) {
    EXPECT_NEAR(r->epochs[e].train_loss, f.loss[e], kBand) << "epoch " << e + 1;
    EXPECT_NEAR(r->epochs[e].val_ap, f.val_ap[e], kBand) << "epoch " << e + 1;
  }
  EXPECT_NEAR(r->test.ap, f.test_ap, kBand);
  EXPECT_NEAR(r->test.new_node_ap, f.new_node_test_ap, kBand);
}

INSTANTIATE_TEST_SUITE_P(Models, ModelGoldenTest, ::testing::ValuesIn(kGolden),
                         [](const ::testing::TestParamInfo<Golden>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace mnemo::runtime
