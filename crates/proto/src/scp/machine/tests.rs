use super::*;

/// Which of a triad's boards each chip is on, as SpiNNMachine 7.4.1's
/// `SpiNNakerTriadGeometry.get_spinn5_geometry().get_ethernet_chip_coordinates` gives
/// it for a 12 x 12 machine (0 = (0, 0), 1 = (4, 8), 2 = (8, 4)); top row first.
const SPINN_MACHINE_TRIAD: [&str; 12] = [
    "222211111111",
    "222211111112",
    "222211111122",
    "222211111222",
    "222200002222",
    "222000002222",
    "220000002222",
    "200000002222",
    "000000001111",
    "000000011111",
    "000000111111",
    "000001111111",
];

#[test]
fn a_triad_splits_into_boards_as_spinn_machine_splits_it() {
    let triad = Geometry::for_boards(3).unwrap();
    for (row, text) in SPINN_MACHINE_TRIAD.iter().enumerate() {
        let y = 11 - row as u8;
        for (x, board) in text.bytes().enumerate() {
            let want = usize::from(board - b'0');
            assert_eq!(triad.board_of(x as u8, y), Some(want), "chip ({x}, {y})");
        }
    }
}

#[test]
fn every_board_has_48_chips_and_its_ethernet_chip_where_spinnaker_puts_it() {
    for boards in [1, 3, 6, 24] {
        let machine = Geometry::for_boards(boards).unwrap();
        let mut counts = [0usize; 24];
        for (x, y) in machine.iter_chips() {
            counts[machine.board_of(x, y).unwrap()] += 1;
            let ethernet = machine.is_ethernet(x, y);
            assert_eq!(
                ethernet,
                x % 4 == 0 && (u16::from(x) + u16::from(y)) % 12 == 0
                    || !machine.wraps() && (x, y) == (0, 0)
            );
        }
        assert_eq!(
            &counts[..boards],
            &[BOARD_CHIPS; 24][..boards],
            "{boards} boards"
        );
        assert_eq!(machine.iter_chips().count(), machine.chips());
        for board in 0..boards {
            let (x, y) = machine.ethernet(board).unwrap();
            assert_eq!(machine.board_of(x, y), Some(board));
        }
        assert_eq!(machine.ethernet(boards), None);
    }
    // SpiNNMachine's answer for two chips of a 48 x 24 machine.
    let machine = Geometry::for_boards(24).unwrap();
    assert_eq!((machine.width(), machine.height()), (48, 24));
    assert_eq!(machine.ethernet_of(47, 23), Some((40, 20)));
    assert_eq!(machine.ethernet_of(13, 1), Some((12, 0)));
}

#[test]
fn only_rectangles_of_triads_are_machines() {
    assert_eq!(Geometry::for_boards(1), Ok(Geometry::Board));
    assert_eq!(
        Geometry::for_boards(6),
        Ok(Geometry::Triads { across: 2, up: 1 })
    );
    assert_eq!(
        Geometry::for_boards(12),
        Ok(Geometry::Triads { across: 2, up: 2 })
    );
    assert_eq!(
        Geometry::for_boards(24),
        Ok(Geometry::Triads { across: 4, up: 2 })
    );
    assert_eq!(
        Geometry::for_boards(1200),
        Ok(Geometry::Triads { across: 20, up: 20 })
    );
    assert_eq!(Geometry::from_size(8, 8), Some(Geometry::Board));
    assert_eq!(Geometry::from_size(48, 24), Geometry::for_boards(24).ok());
    assert_eq!(Geometry::from_size(16, 16), None);
    assert_eq!(Geometry::from_size(12, 0), None);
    for bad in [0, 2, 4, 5, 69, 3 * 22 * 22] {
        let error = Geometry::for_boards(bad).unwrap_err();
        assert_eq!(error.boards, bad);
    }
}

#[test]
fn a_single_board_is_the_48_chip_hexagon_without_wrap_around() {
    let board = Geometry::Board;
    assert!(board.contains(0, 0) && board.contains(0, 3) && board.contains(7, 7));
    assert!(!board.contains(0, 4) && !board.contains(5, 0) && !board.contains(8, 0));
    // (0, 0) has east, north-east and north only.
    assert_eq!(board.links(0, 0), 0b000111);
    assert_eq!(board.neighbour(0, 0, 3), None);
    assert_eq!(board.hops((0, 0), (7, 7)), 7);
    assert_eq!(board.hops((0, 3), (4, 0)), 7);
    let torus = Geometry::for_boards(3).unwrap();
    assert_eq!(torus.links(0, 0), 0b111111);
    assert_eq!(torus.neighbour(0, 0, 4), Some((11, 11)));
    assert_eq!(torus.hops((0, 0), (11, 11)), 1);
}

#[test]
fn the_p2p_table_and_chip_info_read_back_as_written() {
    let machine = Geometry::for_boards(3).unwrap();
    let mut column = [0u8; 128];
    let x = 5u16;
    for word in 0..32 {
        let bits = machine.p2p_word((0, 0), x as u32 * 32 + word);
        column[word as usize * 4..][..4].copy_from_slice(&bits.to_le_bytes());
    }
    let routes: std::vec::Vec<_> = parse_p2p_column(&column[..p2p_column_len(12)], 12)
        .unwrap()
        .collect();
    assert_eq!(routes.len(), 12);
    assert!(routes.iter().all(|&(_, route)| route != Route::None));
    assert_eq!(machine.route((0, 0), (0, 0)), Route::Monitor);
    assert!(parse_p2p_column(&column[..7], 12).is_err());
    let single = Geometry::Board;
    assert_eq!(single.route((0, 0), (0, 5)), Route::None);

    let info = ChipInfo::of(&machine, 4, 8, [10, 0, 0, 2], 1 << 27).unwrap();
    assert!(info.ethernet_up);
    assert_eq!(info.nearest_ethernet, (4, 8));
    assert_eq!(ChipInfo::parse(&info.emit()), Ok(info));
    let far = ChipInfo::of(&machine, 5, 9, [10, 0, 0, 2], 1 << 27).unwrap();
    assert_eq!(
        (far.ip, far.ethernet_up, far.nearest_ethernet),
        ([0; 4], false, (4, 8))
    );
    assert!(ChipInfo::parse(&info.emit()[..20]).is_err());

    let sv = machine
        .system_variables(4, 8, [10, 0, 0, 2], 0x6000_0000)
        .unwrap();
    assert_eq!((sv[sv::X_SIZE], sv[sv::Y_SIZE]), (12, 12));
    assert_eq!(&sv[sv::ETHERNET_IP..][..4], &[10, 0, 0, 2]);
    assert_eq!(
        machine.system_variables(4, 9, [10, 0, 0, 2], 0).unwrap()[sv::ETHERNET_IP],
        0
    );
}
