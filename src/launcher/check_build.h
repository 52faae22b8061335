// CheckBuild: `ringfoldrun --check-build`, horovodrun's -cb for ringfold: which transports,
// reducers and framework bindings this build has, and whether this machine can use them.
//
// What was compiled comes from CMake (compile definitions of this file: io_uring, CUDA
// toolkit, ibverbs backend); what the machine offers is probed at run time: an io_uring_setup
// call, /sys/class/infiniband, /proc/driver/nvidia, the C ABI's ringfold_version symbol in
// the loaded libringfold, and `python3` asked (in a child, at most 20 s) whether the `ringfold`
// package and its framework modules import. Nothing here fails: what is missing is shown as
// "[ ]" with the reason.
#pragma once

#include <string>

namespace ringfold::launcher {

std::string checkBuildReport(const std::string& version);

}  // namespace ringfold::launcher
