/* placeholder replaced below */
#include "testing.h"
int main(int argc, char **argv) {
    test_init(&argc, &argv);
    return test_finish("test_tp_reference");
}
