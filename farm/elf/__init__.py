"""The farm's one ELF reader, in three parts that share one set of layouts:

- `structure`: is the file's structure sound (every table, section, name and symbol inside the file)? Run
  before any external tool reads an object, and before pyelftools reads an irregular one;
- `fast`: the facts of a plain AMDGPU object read with `struct` (measured: ~1.5 ms of the driver's CPU saved
  per object, farm/elf/fast.py); anything unusual is declined, never guessed at;
- `image`: any ELF file read whole with pyelftools (header, sections, notes, segments, symbols).

`code_object.read_code_object` puts them together: fast, else structure check then image.
"""
