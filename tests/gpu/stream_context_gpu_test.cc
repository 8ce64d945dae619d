// CudnnContext::for_stream: a cuDNN handle bound to a stream the caller owns (a framework's
// current stream). The handle runs on that stream, and the stream outlives the context.
#include <cuda_runtime.h>
#include <cudnn.h>
#include <gtest/gtest.h>

#include "convplan/cudnn_backend.h"
#include "support/gpu.h"

namespace convplan {
namespace {

TEST(CudnnContextForStream, BadDeviceIsAnErrorNamingIt) {
  StatusOr<CudnnContext> ctx = CudnnContext::for_stream(-1, nullptr);
  ASSERT_FALSE(ctx.ok());
  if (gpu_available().ok()) {
    EXPECT_EQ(ctx.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(ctx.status().message().find("device=-1"), std::string::npos)
        << ctx.status().message();
  } else {
    EXPECT_EQ(ctx.status().code(), StatusCode::kNoDevice);
  }
}

TEST(CudnnContextForStream, HandleRunsOnTheCallersStreamWhichOutlivesIt) {
  CONVPLAN_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  {
    StatusOr<CudnnContext> ctx = CudnnContext::for_stream(0, stream);
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    EXPECT_EQ(ctx->stream(), stream);
    cudaStream_t bound = nullptr;
    ASSERT_EQ(cudnnGetStream(ctx->handle(), &bound), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(bound, stream);
    CudnnContext moved = std::move(*ctx);  // the moved-from one must not destroy the stream
    EXPECT_EQ(moved.stream(), stream);
    EXPECT_TRUE(moved.synchronize().ok());
  }
  // Destroying the context left the stream alone: it still takes work.
  EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(CudnnContextForStream, SetStreamRebindsOnlyCallerOwnedStreams) {
  CONVPLAN_REQUIRE_GPU();
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  {
    StatusOr<CudnnContext> ctx = CudnnContext::for_stream(0, a);
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    ASSERT_TRUE(ctx->set_stream(b).ok());
    cudaStream_t bound = nullptr;
    ASSERT_EQ(cudnnGetStream(ctx->handle(), &bound), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(bound, b);
    EXPECT_EQ(ctx->stream(), b);

    StatusOr<CudnnContext> owning = CudnnContext::create(0);
    ASSERT_TRUE(owning.ok()) << owning.status().to_string();
    const cudaStream_t own = owning->stream();
    EXPECT_EQ(owning->set_stream(a).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(owning->stream(), own);
  }
  EXPECT_EQ(cudaStreamSynchronize(a), cudaSuccess);  // neither stream was destroyed
  EXPECT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(a), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(b), cudaSuccess);
}

}  // namespace
}  // namespace convplan
