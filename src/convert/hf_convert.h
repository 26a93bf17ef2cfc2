// kestrel convert HF_DIR -o model.gguf: a Hugging Face folder written out as a GGUF file (the same
// metadata, tensor names and conventions that loading the folder directly uses).
#pragma once

#include <string>

namespace kestrel {

void convert_hf_to_gguf(const std::string& folder, const std::string& output_path);

}  // namespace kestrel
