// The checking macros: what a failed cuDNN or CUDA call's Status says, and which code it gets.
#include <gtest/gtest.h>

#include <string>

#include "cudnn/check.h"
#include "cudnn/descriptor.h"

namespace convplan::cudnn_detail {
namespace {

// EXPECT that `text` contains `part`, printing the text when it does not.
#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

Status finalize_empty_tensor() {
  CONVPLAN_ASSIGN_OR_RETURN(BackendDescriptor d,
                            BackendDescriptor::create(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
  CONVPLAN_CUDNN_CHECK(d.finalize());  // nothing set: cuDNN refuses
  return ok_status();
}

Status failing_cuda_call(cudaError_t e) {
  CONVPLAN_CUDA_CHECK(e);
  return ok_status();
}

Status succeeding_calls() {
  CONVPLAN_CUDNN_CHECK(CUDNN_STATUS_SUCCESS);
  CONVPLAN_CUDA_CHECK(cudaSuccess);
  return ok_status();
}

TEST(CudnnCheck, FailedCudnnCallNamesExpressionFileLineStatusAndCudnnMessage) {
  const Status s = finalize_empty_tensor();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kCudnnError);
  EXPECT_CONTAINS(s.message(), "d.finalize()");
  EXPECT_CONTAINS(s.message(), "tests/cudnn/check_test.cc:");
  EXPECT_CONTAINS(s.message(), "CUDNN_STATUS_BAD_PARAM");
  // cuDNN's own words follow the location: "...check_test.cc:NN: <message>".
  const size_t at = s.message().find("check_test.cc:");
  ASSERT_NE(at, std::string::npos);
  const size_t colon = s.message().find(": ", at);
  ASSERT_NE(colon, std::string::npos) << s.message();
  EXPECT_GT(s.message().size(), colon + 2) << s.message();
}

TEST(CudnnCheck, LastErrorStringIsConsumedSoTheNextFailureStartsClean) {
  ASSERT_FALSE(finalize_empty_tensor().ok());
  char left[256] = {0};
  cudnnGetLastErrorString(left, sizeof(left));
  EXPECT_STREQ(left, "");
}

TEST(CudnnCheck, SuccessPassesThrough) { EXPECT_TRUE(succeeding_calls().ok()); }

TEST(CudnnCheck, FailedCudaCallNamesExpressionErrorNameAndWords) {
  const Status s = failing_cuda_call(cudaErrorInvalidValue);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kCudaError);
  EXPECT_CONTAINS(s.message(), "failed with cudaErrorInvalidValue");
  EXPECT_CONTAINS(s.message(), "tests/cudnn/check_test.cc:");
  EXPECT_CONTAINS(s.message(), cudaGetErrorString(cudaErrorInvalidValue));
  EXPECT_CONTAINS(s.message(), "e failed");  // the expression as written
}

TEST(CudnnCheck, CudaAllocationFailureIsOutOfMemory) {
  EXPECT_EQ(failing_cuda_call(cudaErrorMemoryAllocation).code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(status_code_for(cudaErrorMemoryAllocation), StatusCode::kOutOfMemory);
  EXPECT_EQ(status_code_for(cudaErrorLaunchFailure), StatusCode::kCudaError);
  EXPECT_EQ(status_code_for(cudaSuccess), StatusCode::kOk);
}

TEST(CudnnCheck, EveryNotSupportedStatusIsNotSupported) {
  for (cudnnStatus_t s :
       {CUDNN_STATUS_NOT_SUPPORTED, CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
        CUDNN_STATUS_NOT_SUPPORTED_SHAPE, CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
        CUDNN_STATUS_NOT_SUPPORTED_LAYOUT, CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH,
        CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT,
        CUDNN_STATUS_NOT_SUPPORTED_PADDING}) {
    EXPECT_EQ(status_code_for(s), StatusCode::kNotSupported) << cudnnGetErrorString(s);
  }
}

TEST(CudnnCheck, OtherCudnnFailuresAreCudnnErrorsAndAllocationFailuresOutOfMemory) {
  EXPECT_EQ(status_code_for(CUDNN_STATUS_BAD_PARAM), StatusCode::kCudnnError);
  EXPECT_EQ(status_code_for(CUDNN_STATUS_INTERNAL_ERROR), StatusCode::kCudnnError);
  EXPECT_EQ(status_code_for(CUDNN_STATUS_EXECUTION_FAILED), StatusCode::kCudnnError);
  EXPECT_EQ(status_code_for(CUDNN_STATUS_NOT_INITIALIZED), StatusCode::kCudnnError);
  EXPECT_EQ(status_code_for(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED),
            StatusCode::kOutOfMemory);
  EXPECT_EQ(status_code_for(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED),
            StatusCode::kOutOfMemory);
  EXPECT_EQ(status_code_for(CUDNN_STATUS_SUCCESS), StatusCode::kOk);
}

TEST(CudnnCheck, FailureMessageCarriesTheNumericStatus) {
  const Status s =
      cudnn_failure(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "f(x)", "/a/b/src/cudnn/p.cc", 7);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported);
  EXPECT_CONTAINS(s.message(), "f(x) failed with CUDNN_STATUS_NOT_SUPPORTED_SHAPE (3002)");
  EXPECT_CONTAINS(s.message(), "at src/cudnn/p.cc:7");
}

TEST(CudnnCheck, ShortFileNameKeepsThePathFromTheProjectRoot) {
  EXPECT_STREQ(short_file_name("/work/main/src/cudnn/plan.cc"), "src/cudnn/plan.cc");
  EXPECT_STREQ(short_file_name("/w/src/x/tests/cudnn/a.cc"), "tests/cudnn/a.cc");
  EXPECT_STREQ(short_file_name("/tmp/other/file.cc"), "file.cc");
  EXPECT_STREQ(short_file_name("file.cc"), "file.cc");
}

}  // namespace
}  // namespace convplan::cudnn_detail
