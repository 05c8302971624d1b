// RAII as C++ programs write it: a global object owns device memory and frees it in its
// destructor, which runs at exit, after main returns. tests/test_shim_programs.py runs it
// with the leak report and a trace: neither may call that block leaked.
//
// Output: "ok <step>" lines, then "done"; the destructor prints "freed <rc>" to stderr.
#include <cstdio>
#include "acl/acl.h"

namespace {

struct DeviceBlock {
    void *ptr = nullptr;
    ~DeviceBlock()
    {
        if (ptr != nullptr)
            std::fprintf(stderr, "freed %d\n", static_cast<int>(aclrtFree(ptr)));
    }
};

DeviceBlock global_block;

}  // namespace

int main()
{
    if (aclInit(nullptr) != ACL_SUCCESS || aclrtSetDevice(0) != ACL_SUCCESS) {
        std::printf("FAIL setup\n");
        return 1;
    }
    std::printf("ok setup\n");
    if (aclrtMalloc(&global_block.ptr, 1 << 20, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) {
        std::printf("FAIL malloc\n");
        return 1;
    }
    std::printf("ok malloc\n");
    std::printf("done\n");
    return 0;
}
