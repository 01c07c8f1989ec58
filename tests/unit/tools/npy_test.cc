#include "gpu/tools/npy.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace leapcache::tools {
namespace {

namespace fs = std::filesystem;

// gmock's HasSubstr without the gmock dependency.
::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

// A fresh folder per test, removed afterwards; the random suffix keeps concurrent runs (two
// build trees under one ctest -j) apart.
class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("npy_test_" + std::string(info->name()) + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string ReadBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  static void WriteBytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

  // A .npy image with an arbitrary header dict and payload, for the reader's rejection paths.
  static std::string Craft(const std::string& dict, const std::string& payload, int major = 1,
                           int minor = 0) {
    const size_t len_bytes = major == 1 ? 2 : 4;
    std::string header = dict;
    while ((8 + len_bytes + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::string s = "\x93NUMPY";
    s += static_cast<char>(major);
    s += static_cast<char>(minor);
    for (size_t i = 0; i < len_bytes; ++i) {
      s += static_cast<char>((header.size() >> (8 * i)) & 0xff);
    }
    return s + header + payload;
  }

  static std::string FloatBytes(const std::vector<float>& v) {
    std::string s(v.size() * 4, '\0');
    std::memcpy(s.data(), v.data(), s.size());
    return s;
  }

  fs::path dir_;
};

TEST_F(NpyTest, RoundTripsShapes) {
  const std::vector<std::vector<int64_t>> shapes = {{}, {1}, {5}, {3, 4}, {2, 3, 4}, {0}, {0, 7}};
  for (const auto& shape : shapes) {
    SCOPED_TRACE(ShapeToString(shape));
    const int64_t n = *NumElements(shape);
    std::vector<float> data(n);
    for (int64_t i = 0; i < n; ++i) data[i] = 0.5f * static_cast<float>(i) - 3.25f;
    if (n > 2) data[1] = -0.0f, data[2] = std::numeric_limits<float>::denorm_min();
    const std::string path = Path("a.npy");
    ASSERT_TRUE(WriteNpy(path, shape, data).ok());
    StatusOr<NpyArray> a = ReadNpy(path);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->shape, shape);
    ASSERT_EQ(a->data.size(), data.size());
    for (size_t i = 0; i < data.size(); ++i) {  // bit-exact, -0.0 and denormals included
      EXPECT_EQ(std::bit_cast<uint32_t>(a->data[i]), std::bit_cast<uint32_t>(data[i])) << i;
    }
  }
}

// The bytes np.save writes with numpy >= 1.24 (growth padding, 64-byte alignment).
TEST_F(NpyTest, WritesNumpyBytes) {
  struct Case {
    std::vector<int64_t> shape;
    std::string dict;
  };
  const Case cases[] = {
      {{2, 3},
       "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(20, ' ')},
      {{1000, 64},
       "{'descr': '<f4', 'fortran_order': False, 'shape': (1000, 64), }" + std::string(17, ' ')},
      {{5}, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }" + std::string(20, ' ')},
      {{}, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(ShapeToString(c.shape));
    const std::vector<float> data(*NumElements(c.shape), 1.5f);
    const std::string path = Path("a.npy");
    ASSERT_TRUE(WriteNpy(path, c.shape, data).ok());
    const std::string bytes = ReadBytes(path);
    ASSERT_GE(bytes.size(), 10u);
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    const size_t header_len =
        static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    EXPECT_EQ(header_len, 118u);  // each of these cases puts the data at offset 128
    EXPECT_EQ(bytes.size(), 10 + header_len + 4 * data.size());
    const std::string header = bytes.substr(10, header_len);
    EXPECT_EQ(header, c.dict + std::string(header_len - 1 - c.dict.size(), ' ') + "\n");
    EXPECT_EQ(bytes.substr(128), FloatBytes(data));
    EXPECT_FALSE(fs::exists(path + ".partial"));  // the temporary was renamed into place
  }
}

TEST_F(NpyTest, PadsAFullBlockWhenAlreadyAligned) {
  // A shape whose unpadded header + newline ends exactly on a 64-byte boundary gets 64 more
  // spaces, as numpy's 64 - (n % 64) gives; the data still starts 64-byte aligned.
  std::vector<int64_t> shape(13, 1);
  shape.push_back(123);
  const std::string dict =
      "{'descr': '<f4', 'fortran_order': False, 'shape': " + ShapeToString(shape) + ", }" +
      std::string(20, ' ');
  ASSERT_EQ((10 + dict.size() + 1) % 64, 0u) << dict.size();
  ASSERT_TRUE(WriteNpy(Path("a.npy"), shape, std::vector<float>(123)).ok());
  const std::string bytes = ReadBytes(Path("a.npy"));
  EXPECT_EQ(bytes.size(), 10 + dict.size() + 64 + 1 + 4 * 123);
  StatusOr<NpyArray> a = ReadNpy(Path("a.npy"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->shape, shape);
}

TEST_F(NpyTest, WriteRejectsSizeMismatchAndNegativeDims) {
  Status s = WriteNpy(Path("a.npy"), std::vector<int64_t>{2, 3}, std::vector<float>(5));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "(2, 3) holds 6 elements but 5 were given"));
  s = WriteNpy(Path("a.npy"), std::vector<int64_t>{-1}, std::vector<float>());
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(fs::exists(Path("a.npy")));
}

TEST_F(NpyTest, WriteReplacesExistingFile) {
  const std::string path = Path("a.npy");
  ASSERT_TRUE(WriteNpy(path, std::vector<int64_t>{3}, std::vector<float>{1, 2, 3}).ok());
  ASSERT_TRUE(WriteNpy(path, std::vector<int64_t>{1}, std::vector<float>{7}).ok());
  StatusOr<NpyArray> a = ReadNpy(path);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->data, std::vector<float>{7});
}

TEST_F(NpyTest, WriteIntoMissingFolderFailsCleanly) {
  const Status s =
      WriteNpy(Path("no/such/dir/a.npy"), std::vector<int64_t>{1}, std::vector<float>{1});
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "a.npy"));
}

TEST_F(NpyTest, ReadsHeaderVariants) {
  const std::string payload = FloatBytes({1, 2, 3, 4, 5, 6});
  const std::vector<std::string> dicts = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
      "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",    // any order, no trailing ,
      "{\"descr\":\"<f4\",\"fortran_order\":False,\"shape\":(2,3)}",  // double quotes, no spaces
      "{ 'descr' : '<f4' ,\t'fortran_order' : False , 'shape' : ( 2 , 3 , ) , }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }",  // Python 2 numpy
  };
  for (const std::string& dict : dicts) {
    SCOPED_TRACE(dict);
    WriteBytes(Path("a.npy"), Craft(dict, payload));
    StatusOr<NpyArray> a = ReadNpy(Path("a.npy"));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a->data, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  }
}

TEST_F(NpyTest, ReadsVersions2And3) {
  for (int major : {2, 3}) {
    WriteBytes(Path("a.npy"), Craft("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
                                    FloatBytes({1, 2, 3}), major));
    StatusOr<NpyArray> a = ReadNpy(Path("a.npy"));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->shape, std::vector<int64_t>{3});
    EXPECT_EQ(a->data, (std::vector<float>{1, 2, 3}));
  }
}

TEST_F(NpyTest, ReadsZeroDimensional) {
  WriteBytes(Path("a.npy"),
             Craft("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", FloatBytes({2.5f})));
  StatusOr<NpyArray> a = ReadNpy(Path("a.npy"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(a->shape.empty());
  EXPECT_EQ(a->data, std::vector<float>{2.5f});
}

// Reads `bytes` as a.npy and expects an error of `want_code` whose message has the path and `what`.
#define EXPECT_REJECTED(bytes, want_code, what)                        \
  do {                                                                 \
    WriteBytes(Path("a.npy"), bytes);                                  \
    StatusOr<NpyArray> r = ReadNpy(Path("a.npy"));                     \
    ASSERT_FALSE(r.ok());                                              \
    EXPECT_EQ(r.status().code(), want_code) << r.status().ToString();  \
    EXPECT_TRUE(Contains(r.status().message(), Path("a.npy") + ": ")); \
    EXPECT_TRUE(Contains(r.status().message(), what));                 \
  } while (0)

TEST_F(NpyTest, RejectsMissingFileAndFolder) {
  StatusOr<NpyArray> r = ReadNpy(Path("missing.npy"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(r.status().message(), "missing.npy: no such file"));
  fs::create_directories(Path("d.npy"));
  r = ReadNpy(Path("d.npy"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "is a directory"));
}

TEST_F(NpyTest, RejectsOtherDtypes) {
  const std::string four = FloatBytes({1, 2});
  EXPECT_REJECTED(Craft("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", four),
                  StatusCode::kInvalidArgument, "dtype '<f8' (float64) is not supported");
  EXPECT_REJECTED(Craft("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", four),
                  StatusCode::kInvalidArgument, "dtype '>f4' (big-endian float32)");
  EXPECT_REJECTED(Craft("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", four),
                  StatusCode::kInvalidArgument, "dtype '<i4' (int32)");
  EXPECT_REJECTED(Craft("{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", four),
                  StatusCode::kInvalidArgument, "'<f2' (float16)");
  EXPECT_REJECTED(Craft("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", four),
                  StatusCode::kInvalidArgument, "structured dtypes are not supported");
}

TEST_F(NpyTest, RejectsFortranOrder) {
  EXPECT_REJECTED(Craft("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                        FloatBytes(std::vector<float>(6))),
                  StatusCode::kInvalidArgument, "Fortran order");
}

TEST_F(NpyTest, RejectsDataSizeMismatch) {
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  EXPECT_REJECTED(Craft(dict, FloatBytes(std::vector<float>(5))), StatusCode::kDataLoss,
                  "data is truncated: shape (2, 3) needs 24 bytes of '<f4' data, the file has 20");
  EXPECT_REJECTED(Craft(dict, FloatBytes(std::vector<float>(6)) + "xy"), StatusCode::kDataLoss,
                  "2 unexpected trailing bytes");
  // A whole valid file cut short in its data.
  ASSERT_TRUE(WriteNpy(Path("b.npy"), std::vector<int64_t>{4, 4}, std::vector<float>(16)).ok());
  const std::string whole = ReadBytes(Path("b.npy"));
  EXPECT_REJECTED(whole.substr(0, whole.size() - 1), StatusCode::kDataLoss, "truncated");
}

TEST_F(NpyTest, RejectsHugeShapes) {
  EXPECT_REJECTED(Craft("{'descr': '<f4', 'fortran_order': False, "
                        "'shape': (4611686018427387904, 4611686018427387904), }",
                        ""),
                  StatusCode::kOutOfRange, "too large");
  EXPECT_REJECTED(
      Craft("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,), }", ""),
      StatusCode::kOutOfRange, "too large");
  EXPECT_REJECTED(Craft("{'descr': '<f4', 'fortran_order': False, "
                        "'shape': (99999999999999999999,), }",
                        ""),
                  StatusCode::kInvalidArgument, "overflows int64");
  // Within int64 but far beyond the file: a size mismatch, found before any allocation.
  EXPECT_REJECTED(
      Craft("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }", ""),
      StatusCode::kDataLoss, "truncated");
}

TEST_F(NpyTest, RejectsBadPreamble) {
  EXPECT_REJECTED(std::string("PK\x03\x04 not numpy at all"), StatusCode::kInvalidArgument,
                  "not a .npy file (bad magic");
  EXPECT_REJECTED(std::string("\x93NUM"), StatusCode::kInvalidArgument, "bad magic");
  EXPECT_REJECTED(std::string(""), StatusCode::kInvalidArgument, "is empty");
  EXPECT_REJECTED(std::string("\x93NUMPY\x01", 7), StatusCode::kDataLoss, "truncated");
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
  EXPECT_REJECTED(Craft(dict, FloatBytes({1}), 4, 0), StatusCode::kInvalidArgument,
                  "unsupported .npy format version 4.0");
  EXPECT_REJECTED(Craft(dict, FloatBytes({1}), 1, 1), StatusCode::kInvalidArgument, "version 1.1");
  // Header length pointing past the end of the file.
  std::string bytes = Craft(dict, "");
  bytes[8] = '\xff';
  bytes[9] = '\x7f';
  EXPECT_REJECTED(bytes, StatusCode::kDataLoss, "runs past the end of the file");
}

TEST_F(NpyTest, RejectsBadHeaders) {
  const std::string f = FloatBytes({1});
  struct Case {
    const char* dict;
    const char* what;
  };
  const Case cases[] = {
      {"{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'"},
      {"{'descr': '<f4', 'shape': (1,)}", "missing key 'fortran_order'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}",
       "unknown key 'extra'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
       "duplicate key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': false, 'shape': (1,)}", "expected True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1)}", "is not a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [1]}", "expected a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", "negative dimension"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1 2)}", "expected ',' or ')'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (,)}", "non-negative integer"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}", "expected ',' or '}'"},
      {"{'descr: '<f4', 'fortran_order': False, 'shape': (1,)}", "expected ':'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", "expected ',' or '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", "unexpected text after"},
      {"['descr', '<f4']", "expected '{'"},
      {"{'descr': 3, 'fortran_order': False, 'shape': (1,)}", "quoted dtype string"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dict);
    EXPECT_REJECTED(Craft(c.dict, f), StatusCode::kInvalidArgument, c.what);
  }
}

TEST(NpyHeader, ParsesDirectly) {
  StatusOr<NpyHeader> h =
      ParseNpyHeader("{'descr': '>f8', 'fortran_order': True, 'shape': (), }\n");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->descr, ">f8");
  EXPECT_TRUE(h->fortran_order);
  EXPECT_TRUE(h->shape.empty());
}

TEST(NpyShape, Strings) {
  EXPECT_EQ(ShapeToString(std::vector<int64_t>{}), "()");
  EXPECT_EQ(ShapeToString(std::vector<int64_t>{3}), "(3,)");
  EXPECT_EQ(ShapeToString(std::vector<int64_t>{2, 3}), "(2, 3)");
}

TEST(NpyShape, NumElements) {
  EXPECT_EQ(*NumElements(std::vector<int64_t>{}), 1);
  EXPECT_EQ(*NumElements(std::vector<int64_t>{2, 3, 4}), 24);
  EXPECT_EQ(*NumElements(std::vector<int64_t>{int64_t{1} << 62, int64_t{1} << 62, 0}), 0);
  EXPECT_EQ(NumElements(std::vector<int64_t>{int64_t{1} << 62, 4}).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(NumElements(std::vector<int64_t>{2, -1}).status().code(), StatusCode::kInvalidArgument);
}

TEST(NpyFinite, AcceptsFiniteAndLocatesTheFirstBadValue) {
  NpyArray a{{2, 3}, {0, 1, -2, 3e38f, -3e38f, std::numeric_limits<float>::denorm_min()}};
  EXPECT_TRUE(CheckFinite("a.npy", a).ok());
  a.data[5] = std::nanf("");
  a.data[4] = std::numeric_limits<float>::infinity();
  Status s = CheckFinite("dir/a.npy", a);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "dir/a.npy: non-finite value inf at flat index 4 (index [1, 1])");
  a.data[4] = 0.0f;
  EXPECT_EQ(CheckFinite("a.npy", a).message(),
            "a.npy: non-finite value nan at flat index 5 (index [1, 2])");
  NpyArray b{{4}, {1, -std::numeric_limits<float>::infinity(), 0, 0}};
  EXPECT_EQ(CheckFinite("b.npy", b).message(), "b.npy: non-finite value -inf at flat index 1");
  NpyArray c{{}, {std::nanf("")}};
  EXPECT_EQ(CheckFinite("c.npy", c).message(), "c.npy: non-finite value nan at flat index 0");
}

}  // namespace
}  // namespace leapcache::tools
