// The cuDNN backend's device-side read_output (src/cudnn/output_check) against Backend's host
// implementation, on contiguous and strided tensors of 2-, 4- and 8-byte elements, and on one
// large enough for many blocks. Skips, naming the reason, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "convplan/backend.h"
#include "convplan/cudnn_backend.h"
#include "cudnn/output_check.h"
#include "support/gpu.h"

namespace convplan {
namespace {

TensorShape shape4(TensorStrides dims, TensorStrides strides) {
  TensorShape s;
  s.rank = 4;
  s.dims = dims;
  s.strides = strides;
  return s;
}

class OutputCheckGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CONVPLAN_REQUIRE_GPU();
    auto ctx = CudnnContext::create(0);
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    ctx_.emplace(std::move(ctx).value());
    backend_ = make_cudnn_backend();
  }

  // Uploads `host` (the span), then checks the device path against the host path and returns
  // the device path's answer; `got` receives the gathered elements.
  int64_t check(const std::vector<uint8_t>& host, const TensorShape& s, int64_t elem, bool scan,
                const std::vector<int64_t>& offsets, std::vector<uint8_t>& got) {
    auto buffer = DeviceBuffer::allocate(backend_->default_allocator(ctx_->handle()), host.size());
    EXPECT_TRUE(buffer.ok());
    if (!buffer.ok()) return -2;
    EXPECT_TRUE(
        backend_->copy_to_device(ctx_->handle(), buffer->get(), host.data(), host.size()).ok());
    got.assign(offsets.size() * elem, 0);
    std::vector<uint8_t> want(offsets.size() * elem, 0);
    auto on_device =
        backend_->read_output(ctx_->handle(), buffer->get(), s, elem, scan, offsets, got.data());
    auto on_host = backend_->Backend::read_output(ctx_->handle(), buffer->get(), s, elem, scan,
                                                  offsets, want.data());
    EXPECT_TRUE(on_device.ok()) << on_device.status().to_string();
    EXPECT_TRUE(on_host.ok()) << on_host.status().to_string();
    if (!on_device.ok() || !on_host.ok()) return -2;
    EXPECT_EQ(*on_device, *on_host);
    EXPECT_EQ(got, want);
    for (size_t i = 0; i < offsets.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(got.data() + i * elem, host.data() + offsets[i] * elem, elem)) << i;
    }
    return *on_device;
  }

  std::optional<CudnnContext> ctx_;
  std::shared_ptr<Backend> backend_;
};

TEST_F(OutputCheckGpuTest, FindsTheSmallestPoisonedElementAndGathersTheCheckedOnes) {
  // Contiguous, and with row pitch 9 for 7 elements (the gaps hold the poison, not elements).
  const TensorShape shapes[] = {shape4({4, 3, 5, 7}, {105, 35, 7, 1}),
                                shape4({4, 3, 5, 7}, {135, 45, 9, 1})};
  for (const TensorShape& s : shapes) {
    for (int64_t elem : {2, 4, 8}) {
      SCOPED_TRACE("elem " + std::to_string(elem) + ", span " + std::to_string(s.span_elements()));
      const int64_t span = s.span_elements();
      std::vector<uint8_t> host(static_cast<size_t>(span * elem), 0xFF);
      std::vector<int64_t> elements;
      for (int64_t a = 0; a < 4; ++a)
        for (int64_t b = 0; b < 3; ++b)
          for (int64_t c = 0; c < 5; ++c)
            for (int64_t d = 0; d < 7; ++d)
              elements.push_back(a * s.strides[0] + b * s.strides[1] + c * s.strides[2] + d);
      for (int64_t off : elements) {
        for (int64_t b = 0; b < elem; ++b)
          host[off * elem + b] = static_cast<uint8_t>((off * 7 + b) & 0x7F);
      }
      std::mt19937_64 gen(42);
      std::vector<int64_t> offsets;
      std::sample(elements.begin(), elements.end(), std::back_inserter(offsets), 12, gen);
      std::vector<uint8_t> got;
      EXPECT_EQ(check(host, s, elem, true, offsets, got), -1);  // only the gaps hold the poison

      const int64_t first = elements[elements.size() / 3], second = elements[elements.size() / 2];
      std::fill_n(host.begin() + second * elem, elem, uint8_t{0xFF});
      std::fill_n(host.begin() + first * elem, elem, uint8_t{0xFF});
      EXPECT_EQ(check(host, s, elem, true, offsets, got), first);
      EXPECT_EQ(check(host, s, elem, false, offsets, got), -1);  // not asked to scan
      host[first * elem] = 0x00;                                 // one byte not the poison: written
      EXPECT_EQ(check(host, s, elem, true, offsets, got), second);
    }
  }
}

TEST_F(OutputCheckGpuTest, ScansEveryElementOfALargeTensor) {
  const TensorShape s =
      shape4({64, 64, 64, 256}, {64 * 64 * 256, 64 * 256, 256, 1});  // 128 MiB of bf16
  std::vector<uint8_t> host(static_cast<size_t>(s.span_elements() * 2), 0x3C);
  const int64_t last = s.span_elements() - 1;
  host[last * 2] = host[last * 2 + 1] = 0xFF;
  std::vector<uint8_t> got;
  EXPECT_EQ(check(host, s, 2, true, {0, 12345, last}, got), last);
}

TEST_F(OutputCheckGpuTest, ThisBuildRunsOnTheDevicesArchitecture) {
  // The default CMAKE_CUDA_ARCHITECTURES covers 80, 86, 89 and 90 (+ PTX): GPU 0 must pass the
  // check that the backend makes on a device's first use, and device_of must succeed.
  const Status s = cudnn_detail::check_device_architecture(0);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(backend_->device_of(ctx_->handle()).ok());
}

// The tuner's inputs made on the device (issue 21) must be the host's values bit for bit, or the
// reference computed from the seed would check the engines against other inputs.
TEST_F(OutputCheckGpuTest, DeviceFillHashedMatchesTheHostFillBitForBit) {
  const int64_t n = (int64_t{1} << 22) + 13;  // many blocks, and a ragged end
  for (DataType t : {DataType::kFloat, DataType::kHalf, DataType::kBFloat16, DataType::kDouble}) {
    SCOPED_TRACE(to_string(t));
    const size_t bytes = static_cast<size_t>(n * size_of(t));
    auto on_device = DeviceBuffer::allocate(backend_->default_allocator(ctx_->handle()), bytes);
    auto by_host = DeviceBuffer::allocate(backend_->default_allocator(ctx_->handle()), bytes);
    ASSERT_TRUE(on_device.ok() && by_host.ok());
    ASSERT_TRUE(backend_->fill_hashed(ctx_->handle(), on_device->get(), t, n, 99).ok());
    ASSERT_TRUE(backend_->Backend::fill_hashed(ctx_->handle(), by_host->get(), t, n, 99).ok());
    std::vector<uint8_t> a(bytes), b(bytes);
    ASSERT_TRUE(backend_->copy_to_host(ctx_->handle(), a.data(), on_device->get(), bytes).ok());
    ASSERT_TRUE(backend_->copy_to_host(ctx_->handle(), b.data(), by_host->get(), bytes).ok());
    EXPECT_TRUE(a == b);
  }
}

}  // namespace
}  // namespace convplan
