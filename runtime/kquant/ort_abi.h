/* The few parts of ONNX Runtime's C ABI a custom-op library needs, declared here so the library
 * builds with nothing but a C compiler (the onnxruntime wheel ships no headers).
 *
 * ONNX Runtime's function table (OrtApi) only ever grows at its end, and a slot's position never
 * changes once a version has shipped; each index below is the slot's position in that table
 * (version 1 slots 0-101, KernelContext_ParallelFor since version 17). OrtCustomOp is the struct
 * a library fills in: ONNX Runtime reads only the fields its `version` says exist.
 */
#ifndef HEXRAG_ORT_ABI_H
#define HEXRAG_ORT_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef struct OrtStatus OrtStatus;
typedef struct OrtValue OrtValue;
typedef struct OrtKernelInfo OrtKernelInfo;
typedef struct OrtKernelContext OrtKernelContext;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtCustomOpDomain OrtCustomOpDomain;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
typedef const void *const *OrtApi; /* the function table, read by slot index */

typedef struct OrtApiBase {
  OrtApi (*GetApi)(uint32_t version);
  const char *(*GetVersionString)(void);
} OrtApiBase;

enum { ORT_API_VERSION_USED = 17 };
enum { ORT_OK = 0, ORT_FAIL = 1, ORT_INVALID_ARGUMENT = 2 };
enum { ORT_TENSOR_FLOAT = 1, ORT_TENSOR_UINT8 = 2, ORT_TENSOR_INT32 = 6 };
enum { ORT_IO_REQUIRED = 1 };

/* slots of OrtApi */
enum {
  ORT_CreateStatus = 0,
  ORT_CreateCustomOpDomain = 26,
  ORT_CustomOpDomain_Add = 27,
  ORT_AddCustomOpDomain = 28,
  ORT_GetTensorMutableData = 51,
  ORT_GetDimensionsCount = 61,
  ORT_GetDimensions = 62,
  ORT_GetTensorShapeElementCount = 64,
  ORT_GetTensorTypeAndShape = 65,
  ORT_KernelInfoGetAttribute_float = 85,
  ORT_KernelInfoGetAttribute_int64 = 86,
  ORT_KernelContext_GetInput = 90,
  ORT_KernelContext_GetOutput = 91,
  ORT_ReleaseStatus = 93,
  ORT_ReleaseTensorTypeAndShapeInfo = 99,
  ORT_KernelContext_ParallelFor = 274,
};

#define ORT_FN(api, slot, type) ((type)(api)[slot])

typedef OrtStatus *(*OrtCreateStatusFn)(int code, const char *msg);
typedef OrtStatus *(*OrtCreateCustomOpDomainFn)(const char *domain, OrtCustomOpDomain **out);
typedef OrtStatus *(*OrtCustomOpDomainAddFn)(OrtCustomOpDomain *domain, const void *op);
typedef OrtStatus *(*OrtAddCustomOpDomainFn)(OrtSessionOptions *options, OrtCustomOpDomain *domain);
typedef OrtStatus *(*OrtGetTensorMutableDataFn)(OrtValue *value, void **out);
typedef OrtStatus *(*OrtGetDimensionsCountFn)(const OrtTensorTypeAndShapeInfo *info, size_t *out);
typedef OrtStatus *(*OrtGetDimensionsFn)(const OrtTensorTypeAndShapeInfo *info, int64_t *dims, size_t n);
typedef OrtStatus *(*OrtGetTensorShapeElementCountFn)(const OrtTensorTypeAndShapeInfo *info, size_t *out);
typedef OrtStatus *(*OrtGetTensorTypeAndShapeFn)(const OrtValue *value, OrtTensorTypeAndShapeInfo **out);
typedef OrtStatus *(*OrtKernelInfoGetAttributeFloatFn)(const OrtKernelInfo *info, const char *name, float *out);
typedef OrtStatus *(*OrtKernelInfoGetAttributeInt64Fn)(const OrtKernelInfo *info, const char *name, int64_t *out);
typedef OrtStatus *(*OrtKernelContextGetInputFn)(const OrtKernelContext *ctx, size_t index, const OrtValue **out);
typedef OrtStatus *(*OrtKernelContextGetOutputFn)(OrtKernelContext *ctx, size_t index, const int64_t *dims,
                                                  size_t n, OrtValue **out);
typedef void (*OrtReleaseStatusFn)(OrtStatus *status);
typedef void (*OrtReleaseTensorTypeAndShapeInfoFn)(OrtTensorTypeAndShapeInfo *info);
typedef OrtStatus *(*OrtKernelContextParallelForFn)(const OrtKernelContext *ctx, void (*fn)(void *, size_t),
                                                    size_t total, size_t num_batch, void *data);

/* OrtCustomOp up to version 16 (the first with CreateKernelV2 / KernelComputeV2, which return a
 * status instead of aborting). */
typedef struct OrtCustomOp16 {
  uint32_t version;
  void *(*CreateKernel)(const struct OrtCustomOp16 *op, OrtApi api, const OrtKernelInfo *info);
  const char *(*GetName)(const struct OrtCustomOp16 *op);
  const char *(*GetExecutionProviderType)(const struct OrtCustomOp16 *op);
  int (*GetInputType)(const struct OrtCustomOp16 *op, size_t index);
  size_t (*GetInputTypeCount)(const struct OrtCustomOp16 *op);
  int (*GetOutputType)(const struct OrtCustomOp16 *op, size_t index);
  size_t (*GetOutputTypeCount)(const struct OrtCustomOp16 *op);
  void (*KernelCompute)(void *kernel, OrtKernelContext *ctx);
  void (*KernelDestroy)(void *kernel);
  int (*GetInputCharacteristic)(const struct OrtCustomOp16 *op, size_t index);
  int (*GetOutputCharacteristic)(const struct OrtCustomOp16 *op, size_t index);
  int (*GetInputMemoryType)(const struct OrtCustomOp16 *op, size_t index);
  int (*GetVariadicInputMinArity)(const struct OrtCustomOp16 *op);
  int (*GetVariadicInputHomogeneity)(const struct OrtCustomOp16 *op);
  int (*GetVariadicOutputMinArity)(const struct OrtCustomOp16 *op);
  int (*GetVariadicOutputHomogeneity)(const struct OrtCustomOp16 *op);
  OrtStatus *(*CreateKernelV2)(const struct OrtCustomOp16 *op, OrtApi api, const OrtKernelInfo *info,
                               void **kernel);
  OrtStatus *(*KernelComputeV2)(void *kernel, OrtKernelContext *ctx);
} OrtCustomOp16;

#endif
