#include "reference/reference.hpp"
