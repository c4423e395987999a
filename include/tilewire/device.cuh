// tilewire/device.cuh — the whole device API.
#pragma once
#include "tilewire/device/barrier.cuh"
#include "tilewire/device/coop.cuh"
#include "tilewire/device/context.hpp"
#include "tilewire/device/peer.cuh"
#include "tilewire/device/put.cuh"
#include "tilewire/device/signal.cuh"
#include "tilewire/device/wait.cuh"
