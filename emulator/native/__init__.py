"""The native backend: C switch libraries (sw_api.h), their build helper and the native port loop."""
