# Finds cuDNN 9: defines CUDNN::cudnn (the libcudnn.so shim, which loads the sub-libraries).
find_path(CUDNN_INCLUDE_DIR cudnn_graph.h
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY cudnn
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib64 lib)
if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _v REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
  string(REGEX REPLACE ".*CUDNN_MAJOR ([0-9]+).*" "\\1" CUDNN_VERSION_MAJOR "${_v}")
  string(REGEX REPLACE ".*CUDNN_MINOR ([0-9]+).*" "\\1" CUDNN_VERSION_MINOR "${_v}")
  string(REGEX REPLACE ".*CUDNN_PATCHLEVEL ([0-9]+).*" "\\1" CUDNN_VERSION_PATCH "${_v}")
  set(CUDNN_VERSION "${CUDNN_VERSION_MAJOR}.${CUDNN_VERSION_MINOR}.${CUDNN_VERSION_PATCH}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR VERSION_VAR CUDNN_VERSION)
if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES
    IMPORTED_LOCATION "${CUDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
