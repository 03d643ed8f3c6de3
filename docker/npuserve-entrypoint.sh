#!/bin/bash
# Entrypoint of the Ascend image: CANN's set_env.sh (LD_LIBRARY_PATH for
# libascendcl/libhccl and the driver's libraries, ASCEND_* variables), then
# npuserve with the container's arguments, e.g. a Kubernetes container's
# args (configs/k8s). ASCEND_SET_ENV names another set_env.sh.
set_env="${ASCEND_SET_ENV:-/usr/local/Ascend/ascend-toolkit/set_env.sh}"
if [ -f "$set_env" ]; then
	# shellcheck disable=SC1090
	. "$set_env"
fi
exec "${NPUSERVE:-npuserve}" "$@"
