// EngineConfig's text form, engine note names and cuDNN's knob names.
#include <gtest/gtest.h>

#include <cudnn_graph.h>

#include <random>
#include <string>
#include <vector>

#include "convplan/engine_config.h"

namespace convplan {
namespace {

EngineConfig config(int64_t id, std::vector<KnobChoice> knobs = {}) {
  EngineConfig c;
  c.engine_id = id;
  c.knobs = std::move(knobs);
  return c;
}

TEST(EngineConfigText, PrintsEngineAndSortedKnobs) {
  EXPECT_EQ(config(12).to_string(), "eng12");
  EXPECT_EQ(config(12, {{3, 1}, {10, 2}}).to_string(), "eng12:k3=1,k10=2");
  EXPECT_EQ(config(0, {{1, -1}}).to_string(), "eng0:k1=-1");
}

TEST(EngineConfigText, ParsesWhatItPrints) {
  for (const EngineConfig& c : {config(12), config(12, {{3, 1}, {10, 2}}), config(0, {{1, -1}}),
                                config(-1), config(57, {{0, 0}, {2, 1 << 20}, {43, 1}})}) {
    StatusOr<EngineConfig> back = EngineConfig::parse(c.to_string());
    ASSERT_TRUE(back.ok()) << c.to_string() << ": " << back.status().to_string();
    EXPECT_EQ(*back, c) << c.to_string();
  }
}

TEST(EngineConfigText, RandomConfigsRoundTrip) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    EngineConfig c;
    c.engine_id = static_cast<int64_t>(rng() % 200);
    for (int64_t type = 0; type < 44; ++type) {
      if (rng() % 4 == 0) c.knobs.push_back({type, static_cast<int64_t>(rng() % 100) - 10});
    }
    StatusOr<EngineConfig> back = EngineConfig::parse(c.to_string());
    ASSERT_TRUE(back.ok()) << c.to_string();
    ASSERT_EQ(*back, c) << c.to_string();
  }
}

TEST(EngineConfigText, ParseSortsKnobsByType) {
  StatusOr<EngineConfig> c = EngineConfig::parse("eng7:k10=2,k3=1,k5=0");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->engine_id, 7);
  EXPECT_EQ(c->knobs, (std::vector<KnobChoice>{{3, 1}, {5, 0}, {10, 2}}));
  EXPECT_EQ(c->to_string(), "eng7:k3=1,k5=0,k10=2");
}

TEST(EngineConfigText, RejectsARepeatedKnobNamingIt) {
  StatusOr<EngineConfig> c = EngineConfig::parse("eng7:k11=1,k2=3,k11=2");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("knob type 11 (MULTIPLY) is repeated"), std::string::npos)
      << c.status().message();
}

TEST(EngineConfigText, RejectsGarbageNamingIt) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "must start with 'eng'"},
      {"engine12", "expected the engine number"},
      {"eng", "expected the engine number"},
      {"eng12x", "unexpected 'x' at 5"},
      {"eng12k3=1", "unexpected 'k3=1' at 5"},
      {"eng12:", "'' at 6 is not a knob choice"},
      {"eng12:k3", "'k3' at 6 is not a knob choice"},
      {"eng12:k3=", "'k3=' at 6"},
      {"eng12:k3=1,", "'' at 11"},
      {"eng12:j3=1", "'j3=1' at 6"},
      {"eng12:k3=1x,k4=2", "'k3=1x' at 6"},
      {"eng12:k3=1;k4=2", "'k3=1;k4=2' at 6"},
      {" eng12", "must start with 'eng'"},
  };
  for (const auto& [text, part] : cases) {
    StatusOr<EngineConfig> c = EngineConfig::parse(text);
    ASSERT_FALSE(c.ok()) << "accepted '" << text << "'";
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(part), std::string::npos)
        << "'" << text << "': " << c.status().message();
    EXPECT_NE(c.status().message().find(std::string("'") + text + "'"), std::string::npos)
        << c.status().message();
  }
}

TEST(EngineNotes, PrintsNamesInBitOrder) {
  EXPECT_EQ(notes_to_string(0), "");
  EXPECT_EQ(notes_to_string(kNoteNonDeterministic | kNoteTensorCore),
            "tensor_core,non_deterministic");
  EXPECT_EQ(notes_to_string(kNoteSupportsCudaGraphNativeApi | kNoteWinogradTile13x13 | kNoteFft),
            "fft,winograd_13x13,supports_cuda_graph_native_api");
  EXPECT_EQ(notes_to_string(1u << 9 | kNoteDownConvertInputs), "down_convert_inputs,bit9");
}

TEST(EngineNotes, EveryNameParsesToItsBit) {
  const std::pair<const char*, Note> names[] = {
      {"tensor_core", kNoteTensorCore},
      {"down_convert_inputs", kNoteDownConvertInputs},
      {"reduced_precision_reduction", kNoteReducedPrecisionReduction},
      {"fft", kNoteFft},
      {"non_deterministic", kNoteNonDeterministic},
      {"winograd", kNoteWinograd},
      {"winograd_4x4", kNoteWinogradTile4x4},
      {"winograd_6x6", kNoteWinogradTile6x6},
      {"winograd_13x13", kNoteWinogradTile13x13},
      {"runtime_compilation", kNoteRuntimeCompilation},
      {"requires_filter_int_reorder", kNoteRequiresFilterIntReorder},
      {"requires_bias_int_reorder", kNoteRequiresBiasIntReorder},
      {"supports_cuda_graph_native_api", kNoteSupportsCudaGraphNativeApi},
  };
  for (const auto& [name, bit] : names) {
    EXPECT_EQ(notes_to_string(bit), name);
    StatusOr<NoteSet> n = parse_notes(name);
    ASSERT_TRUE(n.ok()) << name;
    EXPECT_EQ(*n, static_cast<NoteSet>(bit)) << name;
  }
}

TEST(EngineNotes, EverySetRoundTrips) {
  std::mt19937 rng(3);
  for (int i = 0; i < 5000; ++i) {
    const NoteSet notes = static_cast<NoteSet>(rng());
    StatusOr<NoteSet> back = parse_notes(notes_to_string(notes));
    ASSERT_TRUE(back.ok()) << notes_to_string(notes);
    ASSERT_EQ(*back, notes) << notes_to_string(notes);
  }
  StatusOr<NoteSet> empty = parse_notes("");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, 0u);
  StatusOr<NoteSet> spaced = parse_notes("fft, tensor_core");
  ASSERT_TRUE(spaced.ok());
  EXPECT_EQ(*spaced, static_cast<NoteSet>(kNoteFft | kNoteTensorCore));
}

TEST(EngineNotes, RejectsUnknownAndRepeatedNames) {
  StatusOr<NoteSet> unknown = parse_notes("fft,tensor_cores");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(
      unknown.status().message().find("'tensor_cores' at 4 is not an engine note (tensor_core,"),
      std::string::npos)
      << unknown.status().message();
  StatusOr<NoteSet> repeated = parse_notes("fft,fft");
  ASSERT_FALSE(repeated.ok());
  EXPECT_NE(repeated.status().message().find("'fft' is repeated"), std::string::npos);
  EXPECT_FALSE(parse_notes("bit32").ok());
  EXPECT_FALSE(parse_notes("fft,").ok());
}

TEST(KnobTypeName, MatchesCudnnsEnumByValue) {
  EXPECT_EQ(knob_type_name(CUDNN_KNOB_TYPE_SWIZZLE), "SWIZZLE");
  EXPECT_EQ(knob_type_name(CUDNN_KNOB_TYPE_TILE_SIZE), "TILE_SIZE");
  EXPECT_EQ(knob_type_name(CUDNN_KNOB_TYPE_EDGE), "EDGE");
  EXPECT_EQ(knob_type_name(CUDNN_KNOB_TYPE_MULTIPLY), "MULTIPLY");
  EXPECT_EQ(knob_type_name(CUDNN_KNOB_TYPE_SPLIT_K_BUF), "SPLIT_K_BUF");
  EXPECT_EQ(knob_type_name(CUDNN_KNOB_TYPE_REDUCTION_MODE), "REDUCTION_MODE");
  EXPECT_EQ(knob_type_name(CUDNN_KNOB_TYPE_KERNEL_CFG), "KERNEL_CFG");
  EXPECT_EQ(knob_type_name(CUDNN_KNOB_TYPE_TILE_CGA_N), "TILE_CGA_N");
  EXPECT_EQ(knob_type_name(CUDNN_KNOB_TYPE_STREAM_K), "STREAM_K");
  EXPECT_EQ(knob_type_name(CUDNN_KNOB_TYPE_SWAP_AB), "SWAP_AB");
  EXPECT_EQ(knob_type_name(0), "SPLIT_K");
  EXPECT_EQ(knob_type_name(3), "USE_TEX");
}

// "k<t>", appended: "k" + std::to_string(t) trips GCC 12's false -Wrestrict at -O3 (core/quoted.h).
std::string unnamed_knob(int64_t t) { return std::string("k").append(std::to_string(t)); }

TEST(KnobTypeName, NamesEveryKnobAndOnlyThose) {
  for (int64_t t = 0; t < CUDNN_KNOB_TYPE_COUNTS; ++t) {
    EXPECT_NE(knob_type_name(t), unnamed_knob(t)) << t;
  }
  EXPECT_EQ(knob_type_name(CUDNN_KNOB_TYPE_COUNTS), unnamed_knob(CUDNN_KNOB_TYPE_COUNTS));
  EXPECT_EQ(knob_type_name(-1), "k-1");
  EXPECT_EQ(knob_type_name(1000), "k1000");
}

}  // namespace
}  // namespace convplan

namespace convplan {
namespace {

TEST(EngineConfigUnfused, PrefixRoundTripsAndOrdersApart) {
  EngineConfig c;
  c.engine_id = 12;
  c.knobs = {{3, 1}};
  c.unfused = true;
  EXPECT_EQ(c.to_string(), "unfused+eng12:k3=1");
  StatusOr<EngineConfig> back = EngineConfig::parse(c.to_string());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, c);
  EngineConfig fused = c;
  fused.unfused = false;
  EXPECT_EQ(fused.to_string(), "eng12:k3=1");
  EXPECT_NE(fused, c);
  EXPECT_TRUE(fused < c || c < fused);  // distinct set/map keys in the tuner and the cache
  StatusOr<EngineConfig> bare = EngineConfig::parse("unfused+eng0");
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(bare->unfused);
  EXPECT_EQ(bare->engine_id, 0);
}

TEST(EngineConfigUnfused, ComesBeforeARewrite) {
  EngineConfig c;
  c.engine_id = 62;
  c.rewrite = "s2d2";
  c.unfused = true;
  EXPECT_EQ(c.to_string(), "unfused+s2d2+eng62");
  StatusOr<EngineConfig> back = EngineConfig::parse(c.to_string());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, c);
  StatusOr<EngineConfig> twice = EngineConfig::parse("unfused+unfused+eng1");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("'unfused' is not a rewrite"), std::string::npos)
      << twice.status().message();
}

TEST(EngineConfigUnfused, MalformedPrefixesAreRejected) {
  for (const char* text : {"unfused+", "unfused", "unfused+unfused+eng1", "unfused-eng1",
                           "eng1+unfused", "UNFUSED+eng1", "unfused+ eng1"}) {
    StatusOr<EngineConfig> c = EngineConfig::parse(text);
    EXPECT_FALSE(c.ok()) << "accepted '" << text << "'";
    if (!c.ok()) {
      EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

}  // namespace
}  // namespace convplan
