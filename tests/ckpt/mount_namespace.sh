# Sourced by the tests that mount tmpfs disks: re-runs the test in a private mount namespace
# (unshare), so that no mount outlives it, and skips it (exit 77) where making the namespace or
# mounting is not permitted (no CAP_SYS_ADMIN: an unprivileged container).
if [[ -z "${ZOE_TEST_IN_MOUNT_NS:-}" ]]; then
    if ! unshare --mount --propagation private true 2> /dev/null; then
        echo "SKIP: cannot make a mount namespace for a tmpfs (unshare --mount: not permitted)"
        exit 77
    fi
    ZOE_TEST_IN_MOUNT_NS=1 exec unshare --mount --propagation private bash "$0" "$@"
fi
# mount_tmpfs DIR BYTES: a tmpfs of that size on DIR (made if needed).
mount_tmpfs() {
    mkdir -p "$1"
    if ! mount -t tmpfs -o size="$2" tmpfs "$1" 2> mount.err; then
        echo "SKIP: cannot mount a tmpfs: $(cat mount.err)"
        exit 77
    fi
}
