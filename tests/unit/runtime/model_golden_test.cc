// Every model gives the figures it gave when they were recorded: losses,
// validation and test AP of short runs on real data with one seed. Any change
// of what is computed (initialization order, a missed update, another batch
// layout, the order of a step's stages) moves these figures by far more than
// their tolerance (1e-4).
//
// Two epochs of training carry a rounding difference far (TGN's validation
// AP moved by 0.06 between an AMD EPYC and an Intel Xeon, both with
// AVX-512), so the runs use kernels that compute alike on every x86-64 CPU
// with AVX2: MKL's conditional numerical reproducibility on its AVX2 code
// path (MKL_CBWR) and LibTorch's AVX2 kernels (ATEN_CPU_CAPABILITY), set
// before LibTorch runs its first kernel (both are read once). This binary
// holds only these tests, so no other test runs on the slower kernels.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <string>

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
// with the kernels above. MNEMO_GOLDEN_PRINT=1 prints each run's figures
// in this table's form (to record them again after a deliberate change).
const Golden kGolden[] = {
    {"TgnCollegeMsg",
     "collegemsg",
     "tgn",
     1,
     {{1.320966049, 1.22481215},
      {0.72569472, 0.770260301},
      0.7945009822,
      0.7587250521}},
    {"TgnWikipedia",
     "wikipedia",
     "tgn",
     1,
     {{1.271374901, 1.056058263},
      {0.823308359, 0.8796481375},
      0.8471437866,
      0.7506009314}},
    {"JodieCollegeMsg",
     "collegemsg",
     "jodie",
     1,
     {{1.448968681, 1.312746015},
      {0.5672409379, 0.6502374914},
      0.6683794073,
      0.5143744418}},
    {"JodieWikipedia",
     "wikipedia",
     "jodie",
     1,
     {{1.48604698, 1.360456854},
      {0.5080640575, 0.6427807013},
      0.6536469271,
      0.5414309818}},
    {"TgnWikipediaImr4",
     "wikipedia",
     "tgn",
     4,
     {{1.275102377, 1.075999777},
      {0.8199737661, 0.8553539174},
      0.8071638785,
      0.7140563647}},
    {"ApanCollegeMsg",
     "collegemsg",
     "apan",
     1,
     {{1.40862518, 1.37837048},
      {0.5234938118, 0.5197819504},
      0.5377002054,
      0.5372399275}},
    {"TgatCollegeMsg",
     "collegemsg",
     "tgat",
     1,
     {{1.364989064, 1.304335898},
      {0.6225028344, 0.7088550063},
      0.6908031685,
      0.6262326377}},
    {"DysatCollegeMsg",
     "collegemsg",
     "dysat",
     1,
     {{1.383609739, 1.320647218},
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
  auto r = Train(o, testing::Quiet());
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->epochs.size(), 2u);
  if (!__builtin_cpu_supports("avx2")) {
    GTEST_SKIP() << "the figures were recorded with AVX2 kernels";
  }
  const Figures& f = g.figures;
  if (std::getenv("MNEMO_GOLDEN_PRINT") != nullptr) {
    std::printf(
        "    {\"%s\", \"%s\", \"%s\", %d,\n     {{%.10g, %.10g}, {%.10g, "
        "%.10g}, %.10g, %.10g}},\n",
        g.name.c_str(), g.dataset.c_str(), g.model.c_str(), g.refine_chunks,
        r->epochs[0].train_loss, r->epochs[1].train_loss, r->epochs[0].val_ap,
        r->epochs[1].val_ap, r->test.ap, r->test.new_node_ap);
  }
  constexpr double kTol = 1e-4;
  for (int e = 0; e < 2; ++e) {
    EXPECT_NEAR(r->epochs[e].train_loss, f.loss[e], kTol) << "epoch " << e + 1;
    EXPECT_NEAR(r->epochs[e].val_ap, f.val_ap[e], kTol) << "epoch " << e + 1;
  }
  EXPECT_NEAR(r->test.ap, f.test_ap, kTol);
  EXPECT_NEAR(r->test.new_node_ap, f.new_node_test_ap, kTol);
}

INSTANTIATE_TEST_SUITE_P(Models, ModelGoldenTest, ::testing::ValuesIn(kGolden),
                         [](const ::testing::TestParamInfo<Golden>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace mnemo::runtime
