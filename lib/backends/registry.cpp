#include "backends/backend.hpp"
